import http from 'node:http';
import https from 'node:https';
import type { z } from 'zod';
import { sleep, workClock, type Clock } from '../../../protocol/clock.js';
import { JobStopped } from './job-batch.js';
import { badReply, busyError, errorForStatus, ServerError, timeoutError, unreachableError, type RequestContext } from './server-error.js';
import { Backoff, type BackoffOptions } from '../../../net/backoff.js';
import { retryAfterMs } from './timing.js';

/** A whole answer, whatever its status. */
export interface HttpReply {
  status: number;
  headers: http.IncomingHttpHeaders;
  bytes: Buffer;
  text: string;
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
 * The HTTP client of every engine that talks to a server. Over node:http, not fetch: fetch's built-in
 * five-minute header and body timeouts would cut off a synchronous generation that takes longer, and it reports
 * a connection dropped mid-answer no differently from one never made. Every failure is a {@link ServerError}
 * (an `EngineError` with a registry code, and the status, the server's own message and body where there was an
 * answer). Busy answers, and failed connections of idempotent requests, are sent again as the
 * {@link RetryPolicy} says — the one place engines retry requests.
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
    const backoff = new Backoff(policy.backoff);
    const started = clock.now();
    /** The last busy answer: what the request fails with if time runs out while waiting. */
    let refused: ServerError | null = null;
    const wait = async (ms: number): Promise<void> => {
      try {
        await sleep(clock, ms, signal);
      } catch (error) {
        // Time ran out during a wait for a busy server: the full queue is the story, not the clock.
        if (refused && ranOutOfTime(signal)) throw busyError(refused, context, clock.now() - started);
        throw error;
      }
    };
    for (let attempt = 0; ; attempt++) {
      let reply: HttpReply;
      try {
        reply = await exchange({ method, url, json: options.json, body: options.body, headers: options.headers, signal, timeoutMs, idempotent }, context);
      } catch (error) {
        if (refused && ranOutOfTime(signal)) throw busyError(refused, context, clock.now() - started);
        if (!(error instanceof ServerError) || !idempotent || attempt >= policy.retries) throw error;
        await wait(backoff.next());
        continue;
      }
      if (isOk(reply.status)) return reply;
      const error = errorForStatus(reply, context);
      if (!policy.busy.includes(reply.status) || attempt >= policy.retries) throw error;
      refused = error;
      const header = reply.headers['retry-after'];
      const told = retryAfterMs(Array.isArray(header) ? header[0]! : header ?? null, clock.now()) ?? 0;
      const ms = Math.min(policy.maxWaitMs, Math.max(backoff.next(), told));
      if (clock.now() + ms >= policy.deadlineAt) throw busyError(error, context, clock.now() - started);
      await wait(ms);
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
    const backoff = new Backoff({ initialMs: 100, maxMs: 2000, factor: 2 });
    for (;;) {
      try {
        return await this.request('GET', path, { headers, timeoutMs: Math.min(timeoutMs, 30_000) });
      } catch (error) {
        if (error instanceof ServerError && error.failure === 'status' && error.status !== 503) return error;
        const notYet = error instanceof ServerError && (error.failure === 'unreachable' || error.failure === 'dropped' || error.status === 503);
        if (!notYet || clock.now() >= giveUpAt) throw error;
      }
      await sleep(clock, Math.min(backoff.next(), Math.max(1, giveUpAt - clock.now())), NEVER_ABORTED);
    }
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

interface Exchange {
  method: string;
  url: string;
  json?: unknown;
  body?: Uint8Array;
  headers?: Record<string, string>;
  signal: AbortSignal;
  timeoutMs: number;
  idempotent: boolean;
}

/** Connection errors that mean nothing reached a server. */
const CONNECT_FAILURES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL']);

/** One request and its whole answer, whatever the status. */
async function exchange(request: Exchange, context: RequestContext): Promise<HttpReply> {
  if (!request.idempotent) return attempt(request, context, true);
  try {
    return await attempt(request, context, false);
  } catch (error) {
    // A keep-alive socket the server closed while idle fails the next request before it is sent;
    // Node's documentation recommends exactly one retry on a fresh connection.
    if (error instanceof StaleSocket) return attempt(request, context, true);
    throw error;
  }
}

class StaleSocket extends Error {}

function attempt(request: Exchange, context: RequestContext, freshSocket: boolean): Promise<HttpReply> {
  const { signal, url, method } = request;
  if (signal.aborted) return Promise.reject(signal.reason);
  const target = new URL(url);
  const transport = target.protocol === 'https:' ? https : http;
  const payload = request.json !== undefined ? Buffer.from(JSON.stringify(request.json)) : request.body;
  return new Promise<HttpReply>((resolve, reject) => {
    let settled = false;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      fn();
    };
    const req = transport.request(target, {
      method,
      headers: {
        accept: 'application/json',
        ...(request.json !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(payload ? { 'content-length': String(payload.byteLength) } : {}),
        ...request.headers,
      },
      ...(freshSocket ? { agent: false } : {}),
    });
    const onAbort = (): void => settle(() => {
      req.destroy();
      reject(signal.reason);
    });
    signal.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => settle(() => {
      req.destroy();
      reject(timeoutError(context, request.timeoutMs));
    }), request.timeoutMs);

    req.on('error', (error: NodeJS.ErrnoException) => settle(() => {
      if (req.reusedSocket && !freshSocket && (error.code === 'ECONNRESET' || error.code === 'EPIPE')) return reject(new StaleSocket());
      if (error.code && CONNECT_FAILURES.has(error.code)) return reject(unreachableError('unreachable', context, `could not connect (${error.code})`, error));
      reject(unreachableError('dropped', context, `${context.what}: the connection closed before an answer (${error.code ?? error.message})`, error));
    }));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', () => { /* reported by 'close' with res.complete false */ });
      res.on('close', () => settle(() => {
        if (!res.complete) {
          return reject(unreachableError('dropped', context, `${context.what}: the connection dropped in the middle of a ${res.statusCode} answer`));
        }
        const bytes = Buffer.concat(chunks);
        const text = bytes.toString('utf8');
        let json: unknown;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, bytes, text, json });
      }));
    });
    req.end(payload);
  });
}
