import { formatError, type ErrorCode } from '../../../protocol/index.js';
import { EngineError } from '../../core/engine.js';
import type { HttpReply } from './http.js';

/** What went wrong with a request to an engine's server. */
export type ServerFailure =
  /** Nothing reached a server: the connection was refused, the host unknown. */
  | 'unreachable'
  /** The connection closed before a whole answer came (before any, or in the middle of one). */
  | 'dropped'
  /** No whole answer within the request's time. */
  | 'timeout'
  /** The server answered with an error status. */
  | 'status'
  /** A whole answer that is not what the protocol promises (a server bug, or the wrong server). */
  | 'protocol';

/** The request a failure belongs to. */
export interface RequestContext {
  /** The model the request was for. */
  model: string;
  /** The server's base URL (or the request's own URL). */
  url: string;
  /** `POST /sdcpp/v1/img_gen` and the like, for the message. */
  what: string;
  /** How {@link ServerError.summary} names the server (`ComfyUI at http://…`); default: the URL's origin. */
  server?: string;
}

/** Where there was an answer: its status, the server's own words, its body. */
interface Answer {
  status: number;
  serverMessage: string;
  body: unknown;
}

interface Facts {
  failure: ServerFailure;
  context: RequestContext;
  /** What went wrong, in words; for a status, the server's own message. */
  detail: string;
  answer?: Answer;
  cause?: unknown;
}

/**
 * Every failure of a request to an engine's server, as one error with a registry code (`EngineError`), and the
 * facts an engine may map differently: what failed, the status, the server's own message and its parsed body.
 * The code, message and retryability are the defaults every engine starts from ({@link errorForStatus} for an
 * error status; `ENGINE_UNREACHABLE` for a connection that failed or dropped; `ENGINE_FAILED`, retryable, for a
 * timeout or an answer that breaks the protocol); an engine that reports some outcome otherwise (the adapters:
 * `NOT_READY` for a server that cannot take the request now) branches on the facts.
 */
export class ServerError extends EngineError {
  readonly failure: ServerFailure;
  /** How the server is named: its origin, or the client's label. */
  readonly server: string;
  /** The request: `POST /prompt`. */
  readonly what: string;
  /** What went wrong, in words (for a status: the server's own message). */
  readonly detail: string;
  /** The answer's status; null where there was no whole answer. */
  readonly status: number | null;
  /** What the server said about the failure, whichever shape its body has ({@link serverMessage}); null without an answer. */
  readonly serverMessage: string | null;
  /** The answer's body: parsed JSON, else its text; undefined without an answer. */
  readonly body: unknown;

  constructor(code: ErrorCode, message: string, retryable: boolean, facts: Facts) {
    super(code, message, retryable, facts.cause === undefined ? undefined : { cause: facts.cause });
    this.failure = facts.failure;
    this.server = facts.context.server ?? new URL(facts.context.url).origin;
    this.what = facts.context.what;
    this.detail = facts.detail;
    this.status = facts.answer?.status ?? null;
    this.serverMessage = facts.answer?.serverMessage ?? null;
    this.body = facts.answer?.body;
  }

  /** 429 and 503 mean "busy, come back". */
  get busy(): boolean {
    return this.status === 429 || this.status === 503;
  }

  /** The failure in plain words, naming the server: `ComfyUI at … answered 429: …`, `… is unreachable: …`. */
  get summary(): string {
    if (this.failure === 'status') return `${this.server} answered ${this.status}: ${this.serverMessage}`;
    if (this.failure === 'protocol') return `${this.server} broke the protocol: ${this.what}: ${this.detail}`;
    return `${this.server} is unreachable: ${this.detail}`;
  }
}

const text = (value: unknown): string | undefined => (typeof value === 'string' && value.trim() ? value.trim() : undefined);

/**
 * The server's own words about a failed request, whichever shape it uses: sd.cpp's
 * `{error: "…", message?: "…"}`, OpenAI's `{error: {message, type, param, code}}`, ComfyUI's
 * `{error: {message, details}}`, OIP's `{error: "…"}`, A1111's FastAPI `{detail: "…"}` or
 * `{error, detail, errors}`, or plain text.
 */
export function serverMessage(reply: HttpReply): string {
  const body = reply.json;
  if (body && typeof body === 'object') {
    const record = body as Record<string, unknown>;
    const error = record.error;
    if (error && typeof error === 'object') {
      const nested = error as Record<string, unknown>;
      const message = text(nested.message) ?? JSON.stringify(error);
      const extra = [text(nested.param) && `param ${String(nested.param)}`, text(nested.code) && `code ${String(nested.code)}`].filter(Boolean);
      const details = text(nested.details);
      return `${details ? `${message}: ${details}` : message}${extra.length ? ` (${extra.join(', ')})` : ''}`;
    }
    const parts = [text(error), text(record.message), text(record.detail), text(record.errors)].filter(Boolean);
    if (parts.length) return [...new Set(parts)].join(': ');
    if (Array.isArray(record.detail)) return JSON.stringify(record.detail);
  }
  return text(reply.text)?.slice(0, 500) ?? '(no message)';
}

/**
 * The error for a server's non-2xx answer. The request is at fault on 400/413/422
 * (`INVALID_INPUT`: another replica would refuse it too, so not retryable); the server's
 * configuration on other 4xx (not retryable either: every attempt would meet it); the server
 * itself on 5xx (retryable). 429 is `ENGINE_BUSY` here; the client backs off before giving up on it.
 */
export function errorForStatus(reply: HttpReply, context: RequestContext): ServerError {
  const message = serverMessage(reply);
  const origin = new URL(context.url).origin;
  const { status } = reply;
  const facts: Facts = { failure: 'status', context, detail: message, answer: { status, serverMessage: message, body: reply.json ?? reply.text } };
  if (status === 400 || status === 413 || status === 422) {
    return new ServerError('INVALID_INPUT', formatError('INVALID_INPUT', {
      model: context.model, detail: `${origin} refused ${context.what} with ${status}: ${message}`,
    }), false, facts);
  }
  if (status === 429) return new ServerError('ENGINE_BUSY', `${origin} answered 429 to ${context.what}: ${message}`, true, facts);
  if (status === 401 || status === 403) {
    return new ServerError('ENGINE_FAILED', `${origin} refused the credentials for ${context.what} (${status}): ${message}`, false, facts);
  }
  return new ServerError('ENGINE_FAILED', `${origin} answered ${status} to ${context.what}: ${message}`, status >= 500, facts);
}

/** A server that kept answering busy until the job's time would run out: `ENGINE_BUSY`, retryable (another replica may have room). */
export function busyError(last: ServerError, context: RequestContext, waitedMs: number): ServerError {
  return new ServerError('ENGINE_BUSY', formatError('ENGINE_BUSY', { url: new URL(context.url).origin, waitedMs }), true, {
    failure: 'status', context, detail: last.detail,
    answer: last.status === null ? undefined : { status: last.status, serverMessage: last.serverMessage ?? last.detail, body: last.body },
  });
}

/** No connection, or one that closed before a whole answer: `ENGINE_UNREACHABLE`, retryable. */
export function unreachableError(failure: 'unreachable' | 'dropped', context: RequestContext, detail: string, cause?: unknown): ServerError {
  return new ServerError('ENGINE_UNREACHABLE', formatError('ENGINE_UNREACHABLE', { url: new URL(context.url).origin, detail }), true, {
    failure, context, detail, cause,
  });
}

/** No whole answer in time: `ENGINE_FAILED`, retryable. */
export function timeoutError(context: RequestContext, timeoutMs: number): ServerError {
  const target = new URL(context.url);
  return new ServerError('ENGINE_FAILED', `${context.what} on ${target.origin} gave no complete answer within ${timeoutMs} ms`, true, {
    failure: 'timeout', context, detail: `${context.what} took longer than ${timeoutMs} ms`,
  });
}

/** An answer that came back whole but is not what the protocol promises (a server bug or the wrong server). */
export function badReply(context: RequestContext, detail: string): ServerError {
  return new ServerError('ENGINE_FAILED', `${new URL(context.url).origin} gave an unexpected answer to ${context.what}: ${detail}`, true, {
    failure: 'protocol', context, detail,
  });
}

/** A failure in plain words: a {@link ServerError}'s summary (naming the server), else the error's message. */
export function summaryOf(error: unknown): string {
  if (error instanceof ServerError) return error.summary;
  return error instanceof Error ? error.message : String(error);
}
