import type { z } from 'zod';
import type { BackoffOptions } from '../../../net/backoff.js';
import { HttpFailure, httpRequest, retrying, type HttpAnswer } from '../../../net/http-client.js';
import { workClock, type Clock } from '../../../protocol/clock.js';
import { JobStopped } from './job-batch.js';
import { badReply, busyError, errorForStatus, ServerError, timeoutError, unreachableError, type RequestContext } from './server-error.js';
import { retryAfterMs } from './timing.js';

/** A whole answer, whatever its status. */
export interface HttpReply extends HttpAnswer {
  /** The body parsed as JSON; undefined when it is empty or not JSON. */
  json: unknown;
}

/** When and how often a request is sent again. */
export interface RetryPolicy {
  /**
   * Attempts after the first: for a busy answer, and — for an idempotent request — for a connection that failed,
   * dropped or timed out. Infinity: until `deadlineAt`.
   */
  retries: number;
  /** The statuses that mean "busy, come back". */
  busy: readonly number[];
  /** The waits between attempts; a busy answer's `Retry-After` is waited instead when it is longer. */
  backoff: BackoffOptions;
  /** No wait is longer than this, whatever `Retry-After` says. */
  maxWaitMs: number;
  /** Epoch ms (a job's deadline): rather than wait past it for a busy server, fail with `ENGINE_BUSY`. */
  deadlineAt: number;
}

/** Unless a client or a request says otherwise: no retries; when there are, 429 and 503 are "busy", waits of 100 ms doubling to 2 s. */
const DEFAULT_RETRY: RetryPolicy = {
  retries: 0, busy: [429, 503], backoff: { initialMs: 100, maxMs: 2000, factor: 2 }, maxWaitMs: 2000, deadlineAt: Number.POSITIVE_INFINITY,
};

/**
 * Wait out a full queue until the job's deadline: 429 answers are sent again after the backoff (or the server's
 * longer `Retry-After`), until the next wait would pass `deadlineAt` — then `ENGINE_BUSY`. A full queue empties
 * as the server works, so waiting beats failing the job.
 */
export function untilDeadline(backoff: BackoffOptions, deadlineAt: number): Partial<RetryPolicy> {
  return { retries: Number.POSITIVE_INFINITY, busy: [429], backoff, maxWaitMs: Number.POSITIVE_INFINITY, deadlineAt };
}

export interface ServerHttpOptions {
  /** The server; its `url` is read before every request, so a provider that restarts a server elsewhere can change it. */
  server: { readonly url: string };
  /** The gpumesh model the requests are for (named in `INVALID_INPUT` errors). */
  model: string;
  /** How errors' summaries name the server: `ComfyUI` → `ComfyUI at http://…`. Default: the server's origin. */
  name?: string;
  /** Per-request limit (ms), unless a request says otherwise. */
  timeoutMs: number;
  /** This client's retries (default: none). */
  retry?: Partial<RetryPolicy>;
  /** For the waits between attempts. Default: real time ({@link workClock}). */
  clock?: Clock;
}

export interface RequestOptions {
  /** Sent as JSON. */
  json?: unknown;
  /** Sent as they are. */
  body?: Uint8Array;
  headers?: Record<string, string>;
  /**
   * Safe to send again after a failed or dropped connection (reads, stateless inference). Default: GET requests.
   * Any other request goes on a fresh connection, never a pooled one the server may have closed while idle, so
   * it is never sent twice (it may already have queued work).
   */
  idempotent?: boolean;
  /** Aborting rejects with the signal's reason (a cancel, a deadline) and closes the connection. */
  signal?: AbortSignal;
  timeoutMs?: number;
  /** This request's retries, over the client's. */
  retry?: Partial<RetryPolicy>;
}

const NEVER_ABORTED = new AbortController().signal;
const isOk = (status: number): boolean => status >= 200 && status < 300;

/**
 * The HTTP client of every engine that talks to a server, over the mesh's one HTTP client (net/http-client.ts).
 * Every failure is a {@link ServerError} (an `EngineError` with a registry code, and the status, the server's own
 * message and body where there was an answer). Busy answers, and failed connections of idempotent requests, are
 * sent again as the {@link RetryPolicy} says — the one place engines retry requests.
 */
export class ServerHttp {
  readonly #options: ServerHttpOptions;
  readonly #clock: Clock;

  constructor(options: ServerHttpOptions) {
    this.#options = options;
    this.#clock = options.clock ?? workClock;
  }

  /** The server's base URL, as it is now. */
  get url(): string {
    return this.#options.server.url.replace(/\/+$/, '');
  }

  /** How errors name the server: `ComfyUI at http://…`, or its origin. */
  get label(): string {
    return this.#options.name ? `${this.#options.name} at ${this.url}` : new URL(this.url).origin;
  }

  /**
   * A request to `path` (on the server; or an absolute URL). Resolves with a 2xx answer; otherwise throws a
   * {@link ServerError} once the retries are spent (or the signal's reason, once it aborts).
   */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<HttpReply> {
    const policy: RetryPolicy = { ...DEFAULT_RETRY, ...this.#options.retry, ...options.retry };
    const idempotent = options.idempotent ?? method === 'GET';
    const signal = options.signal ?? NEVER_ABORTED;
    const url = /^https?:\/\//.test(path) ? path : `${this.url}${path}`;
    const context = this.#context(`${method} ${url === path ? new URL(url).pathname : path}`, url);
    const timeoutMs = options.timeoutMs ?? this.#options.timeoutMs;
    const clock = this.#clock;
    const started = clock.now();
    /** The last busy answer: what the request fails with if time runs out while waiting. */
    let refused: ServerError | null = null;
    const outOfTime = (): ServerError => busyError(refused!, context, clock.now() - started);
    const payload = options.json !== undefined ? Buffer.from(JSON.stringify(options.json)) : options.body;
    const headers = { accept: 'application/json', ...(options.json !== undefined ? { 'content-type': 'application/json' } : {}), ...options.headers };
    try {
      return await retrying<HttpReply>({ retries: policy.retries, backoff: policy.backoff, clock, signal }, async () => {
        let reply: HttpReply;
        try {
          // A request that is not idempotent goes on a connection of its own, never a pooled one the server may have
          // closed while idle, so it is never sent twice (it may already have queued work).
          reply = withJson(await httpRequest(url, { method, headers, body: payload, signal, timeoutMs, idempotent, ...(idempotent ? {} : { agent: false }) }));
        } catch (error) {
          // Time ran out during a request to a busy server: the full queue is the story, not the clock.
          if (refused && ranOutOfTime(signal)) return { failure: outOfTime(), retry: false };
          const failure = asServerError(error, context, timeoutMs);
          return { failure, retry: failure instanceof ServerError && idempotent };
        }
        if (isOk(reply.status)) return { value: reply };
        const error = errorForStatus(reply, context);
        if (!policy.busy.includes(reply.status)) return { failure: error, retry: false };
        refused = error;
        const header = reply.headers['retry-after'];
        const told = retryAfterMs(Array.isArray(header) ? header[0]! : header ?? null, clock.now()) ?? 0;
        return {
          failure: error, retry: true,
          wait: (backoffMs) => {
            const ms = Math.min(policy.maxWaitMs, Math.max(backoffMs, told));
            if (clock.now() + ms >= policy.deadlineAt) throw busyError(error, context, clock.now() - started);
            return ms;
          },
        };
      });
    } catch (error) {
      // Time ran out during a wait for a busy server: the full queue is the story, not the clock.
      if (refused && error === signal.reason && ranOutOfTime(signal)) throw outOfTime();
      throw error;
    }
  }

  /**
   * A request whose answer is JSON: checked by `schema` where one is given (else as it is; undefined when empty).
   * An answer that is not JSON, or not of the schema, is a protocol {@link ServerError}.
   */
  async json<T = unknown>(method: string, path: string, options: RequestOptions & { schema?: z.ZodType<T> } = {}): Promise<T> {
    return this.read(await this.request(method, path, options), `${method} ${path}`, options.schema);
  }

  /** An answer's JSON, checked by `schema` where one is given; a protocol {@link ServerError} when it is not that. */
  read<T = unknown>(reply: HttpReply, what: string, schema?: z.ZodType<T>): T {
    if (schema) {
      const parsed = schema.safeParse(reply.json);
      if (parsed.success) return parsed.data;
      const issues = parsed.error.issues.slice(0, 3).map((issue) => `${issue.path.join('.') || 'body'}: ${issue.message}`).join('; ');
      throw this.unexpected(what, `${reply.status} ${issues} (${reply.text.slice(0, 120)})`);
    }
    if (reply.json === undefined && reply.text.trim()) throw this.unexpected(what, `${reply.status} is not JSON (${reply.text.slice(0, 120)})`);
    return reply.json as T;
  }

  /**
   * GET `path` until the server answers: one that is still starting refuses connections, or answers 503 while it
   * loads its model; tries are 100 ms growing to 2 s apart. Resolves with the answer — a 2xx reply, or the error
   * of any other status — or, past `timeoutMs`, throws the last refusal (or 503); any other failure at once.
   */
  async untilAnswered(path: string, timeoutMs: number, headers?: Record<string, string>): Promise<HttpReply | ServerError> {
    const clock = this.#clock;
    const giveUpAt = clock.now() + timeoutMs;
    return retrying<HttpReply | ServerError>({ retries: Number.POSITIVE_INFINITY, backoff: { initialMs: 100, maxMs: 2000 }, clock }, async () => {
      try {
        return { value: await this.request('GET', path, { headers, timeoutMs: Math.min(timeoutMs, 30_000) }) };
      } catch (error) {
        if (error instanceof ServerError && error.failure === 'status' && error.status !== 503) return { value: error };
        const notYet = error instanceof ServerError && (error.failure === 'unreachable' || error.failure === 'dropped' || error.status === 503);
        return { failure: error, retry: notYet && clock.now() < giveUpAt, wait: (backoffMs) => Math.min(backoffMs, Math.max(1, giveUpAt - clock.now())) };
      }
    });
  }

  /** A request whose answer carries nothing we need. */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<void> {
    await this.request(method, path, options);
  }

  /** An answer to `what` that came back whole but is not what the protocol promises: `ENGINE_FAILED`, retryable. */
  unexpected(what: string, detail: string): ServerError {
    return badReply(this.#context(what), detail);
  }

  /** The request `what` (`POST /prompt`), for errors. */
  #context(what: string, url = this.url): RequestContext {
    return { model: this.#options.model, url, what, server: this.#options.name ? this.label : undefined };
  }
}

const ranOutOfTime = (signal: AbortSignal): boolean =>
  signal.aborted && signal.reason instanceof JobStopped && (signal.reason.why === 'deadline' || signal.reason.why === 'budget');

/** The body parsed as JSON, where it is JSON. */
function withJson(answer: HttpAnswer): HttpReply {
  let json: unknown;
  try {
    json = answer.text ? JSON.parse(answer.text) : undefined;
  } catch {
    json = undefined;
  }
  return { ...answer, json };
}

/** A request that got no answer, as the engines' error: what failed and how, naming the server. */
function asServerError(error: unknown, context: RequestContext, timeoutMs: number): unknown {
  if (!(error instanceof HttpFailure)) return error; // the signal's reason: a cancel, a deadline
  const cause = error.cause ?? error;
  if (error.kind === 'timeout') return timeoutError(context, timeoutMs);
  if (error.kind === 'unreachable') return unreachableError('unreachable', context, `could not connect (${error.code})`, cause);
  if (error.status !== null) return unreachableError('dropped', context, `${context.what}: the connection dropped in the middle of a ${error.status} answer`);
  return unreachableError('dropped', context, `${context.what}: the connection closed before an answer (${error.code ?? error.message})`, cause);
}
