import { formatError } from '../../../protocol/index.js';
import { EngineError } from '../engine.js';
import type { HttpReply } from './client.js';

const text = (value: unknown): string | undefined => (typeof value === 'string' && value.trim() ? value.trim() : undefined);

/**
 * The server's own words about a failed request, whichever shape it uses: sd.cpp's
 * `{error: "…", message?: "…"}`, OpenAI's `{error: {message, type, param, code}}`, A1111's
 * FastAPI `{detail: "…"}` or `{error, detail, errors}`, or plain text.
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
      return extra.length ? `${message} (${extra.join(', ')})` : message;
    }
    const parts = [text(error), text(record.message), text(record.detail), text(record.errors)].filter(Boolean);
    if (parts.length) return [...new Set(parts)].join(': ');
    if (Array.isArray(record.detail)) return JSON.stringify(record.detail);
  }
  return text(reply.text)?.slice(0, 500) ?? '(no message)';
}

export interface RequestContext {
  /** The model the request was for. */
  model: string;
  /** The server's base URL. */
  url: string;
  /** `POST /sdcpp/v1/img_gen` and the like, for the message. */
  what: string;
}

/**
 * The job error for a server's non-2xx answer. The request is at fault on 400/413/422
 * (`INVALID_INPUT`: another replica would refuse it too, so not retryable); the server's
 * configuration on other 4xx (not retryable either: every attempt would meet it); the server
 * itself on 5xx (retryable). 429 is `ENGINE_BUSY` here; callers back off before giving up on it.
 */
export function errorForStatus(reply: HttpReply, context: RequestContext): EngineError {
  const message = serverMessage(reply);
  const origin = new URL(context.url).origin;
  const { status } = reply;
  if (status === 400 || status === 413 || status === 422) {
    return new EngineError('INVALID_INPUT', formatError('INVALID_INPUT', {
      model: context.model, detail: `${origin} refused ${context.what} with ${status}: ${message}`,
    }), false);
  }
  if (status === 429) return new EngineError('ENGINE_BUSY', `${origin} answered 429 to ${context.what}: ${message}`, true);
  if (status === 401 || status === 403) {
    return new EngineError('ENGINE_FAILED', `${origin} refused the credentials for ${context.what} (${status}): ${message}`, false);
  }
  return new EngineError('ENGINE_FAILED', `${origin} answered ${status} to ${context.what}: ${message}`, status >= 500);
}

/** An answer that came back whole but is not what the protocol promises (a server bug or the wrong server). */
export function badReply(context: RequestContext, detail: string): EngineError {
  return new EngineError('ENGINE_FAILED', `${new URL(context.url).origin} gave an unexpected answer to ${context.what}: ${detail}`, true);
}
