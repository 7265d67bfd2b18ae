import { createReadStream } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { sleep, systemClock, type Clock, type Timer } from '../protocol/clock.js';
import { Backoff, type BackoffOptions } from './backoff.js';

/**
 * The one outbound HTTP client: the agent's requests to the orchestrator (model pulls, pictures, uploads, through
 * tls-client's ServerTrust, which adds the pinned CA) and to engine servers (engines/kit/http.ts), readiness polls,
 * the CLI's requests (through ServerTrust), the orchestrator's downloads of declared model files and its webhook
 * deliveries.
 *
 * Over node:http(s) rather than fetch: fetch cannot be given a CA to pin, its built-in five-minute header and body
 * timeouts would cut off a synchronous generation that takes longer, and it reports a connection dropped
 * mid-answer no differently from one never made. Every failure to get an answer is an {@link HttpFailure} that
 * says which it was; an answer of any status is an answer.
 */

/** A body streamed from a file, opened afresh for each attempt: a clip is never held in memory whole. */
export interface FileBody {
  path: string;
  size: number;
}

export interface HttpRequest {
  /** Default GET. */
  method?: string;
  headers?: Record<string, string>;
  /** In memory (sent with its length), or a file streamed from disk. */
  body?: string | Uint8Array | FileBody;
  /**
   * The connection: a keep-alive pool (a ServerTrust's carries the pinned CA); `false`, a connection of its own,
   * closed after the answer. Default: Node's global agent.
   */
  agent?: http.Agent | false;
  /**
   * On a connection of its own over https, accept any certificate: only for bytes that are checked another way (a
   * CA certificate fetched to be compared with its pin).
   */
  unverified?: boolean;
  /** The whole exchange, its answer read to the end, must take no longer (ms). Default: no limit. */
  timeoutMs?: number;
  /** The connection may be silent no longer than this (ms), before the answer or while its body streams. */
  idleTimeoutMs?: number;
  /** Connecting may take no longer (ms); failing it is `unreachable`. Default 10 s. */
  connectTimeoutMs?: number;
  /** Aborting rejects with the signal's reason and closes the connection. */
  signal?: AbortSignal;
  /** An answer longer than this fails (`too-large`). */
  maxBytes?: number;
  /**
   * Safe to send twice: a kept-alive connection the server closed while idle fails the next request before it is
   * sent, and such a request is sent once more on a fresh connection (what Node's documentation recommends).
   * Default: the idempotent methods (GET, HEAD, OPTIONS, PUT, DELETE).
   */
  idempotent?: boolean;
  /**
   * Resolves the host name instead of dns.lookup: the connection is made only to an address it gives (the
   * orchestrator's webhooks pass only addresses their rules allow). Not consulted for a host given as an address.
   */
  lookup?: LookupFunction;
}

/** A whole answer, whatever its status. */
export interface HttpAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  bytes: Buffer;
  text: string;
}

/**
 * Why there is no answer: `unreachable` (no connection was made: nothing was sent), `dropped` (the connection
 * closed before the answer, or in the middle of it: `status` says which), `timeout`, `too-large`. `code` is the
 * system's (ECONNREFUSED, ECONNRESET, a TLS code) where there is one; `cause` the system's error.
 */
export class HttpFailure extends Error {
  override readonly name = 'HttpFailure';
  constructor(
    readonly kind: 'unreachable' | 'dropped' | 'timeout' | 'too-large',
    message: string,
    readonly code: string | undefined,
    /** The status of an answer that dropped in the middle; null before one began. */
    readonly status: number | null = null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** What the system says when no connection was made. */
const CONNECT_FAILURES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'EADDRNOTAVAIL']);
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE']);
const NULL_BODY_STATUSES = new Set([101, 204, 205, 304]);
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const NEVER_ABORTED = new AbortController().signal;

/** What one attempt sends: the options, with the URL parsed and the method settled. */
interface Exchange extends HttpRequest {
  url: URL;
  method: string;
  /** A connection of its own: the retry after a stale kept-alive one. */
  fresh: boolean;
  /** A stale kept-alive connection may be retried (an idempotent request that has not been). */
  staleRetry: boolean;
}

/** A kept-alive connection that the server had closed: worth one more try on a fresh one. */
class StaleSocket extends Error {}

/**
 * Send one request; `onAnswer` gets the answer's head, with the body still to read, and says when the exchange is
 * over (the timers armed for it are cancelled then). Rejects with the signal's reason when it aborts.
 */
function begin(exchange: Exchange, onAnswer: (request: http.ClientRequest, response: http.IncomingMessage, done: (error?: Error) => void) => void): Promise<void> {
  const { url, method, signal = NEVER_ABORTED } = exchange;
  if (signal.aborted) return Promise.reject(signal.reason);
  const transport = url.protocol === 'https:' ? https : http;
  const body = exchange.body;
  const inMemory = typeof body === 'string' ? Buffer.from(body) : body instanceof Uint8Array ? body : undefined;
  const length = inMemory ? inMemory.byteLength : body ? (body as FileBody).size : undefined;
  return new Promise<void>((resolve, reject) => {
    const timers: Timer[] = [];
    let settled = false;
    const settle = (error?: unknown): void => {
      if (settled) return;
      settled = true;
      for (const timer of timers) timer.cancel();
      signal.removeEventListener('abort', onAbort);
      if (error === undefined) resolve();
      else reject(error);
    };
    const agent = exchange.fresh || exchange.agent === false ? false : exchange.agent;
    const request = transport.request(url, {
      method,
      headers: { ...(length !== undefined ? { 'content-length': String(length) } : {}), ...exchange.headers },
      ...(agent === undefined ? {} : { agent }),
      ...(exchange.unverified ? { rejectUnauthorized: false } : {}),
      ...(exchange.idleTimeoutMs !== undefined ? { timeout: exchange.idleTimeoutMs } : {}),
      ...(exchange.lookup ? { lookup: exchange.lookup } : {}),
      // Node's own handling of the signal also ends an answer's body that is still streaming.
      ...(exchange.signal ? { signal: exchange.signal } : {}),
    });
    const fail = (error: Error): void => {
      request.destroy(error);
      settle(error);
    };
    const onAbort = (): void => {
      request.destroy();
      settle(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    // Time here is real time whatever clock the caller waits on: how long the network takes is not the caller's to fake.
    if (exchange.timeoutMs !== undefined) {
      const ms = exchange.timeoutMs;
      timers.push(systemClock.setTimer(ms, () => fail(new HttpFailure('timeout', `no answer within ${ms} ms`, undefined))));
    }
    request.on('socket', (socket) => {
      if (!socket.connecting) return;
      const ms = exchange.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
      const timer = systemClock.setTimer(ms, () => fail(new HttpFailure('unreachable', `no connection to ${url.host} within ${ms} ms`, 'CONNECT_TIMEOUT')));
      timers.push(timer);
      socket.once('connect', () => timer.cancel());
    });
    // Only a limit of its own: a pooled socket's agent may have one too (Node's global agent: 5 s), whose 'timeout' is
    // the agent's business while the socket is idle, and nothing to act on while it carries a request.
    const idleMs = exchange.idleTimeoutMs;
    if (idleMs !== undefined) request.on('timeout', () => fail(new HttpFailure('timeout', `no data for ${idleMs} ms`, undefined)));
    request.on('error', (error: NodeJS.ErrnoException) => {
      if (settled) return;
      if (exchange.staleRetry && request.reusedSocket && (error.code === 'ECONNRESET' || error.code === 'EPIPE')) return settle(new StaleSocket());
      if (error.code && CONNECT_FAILURES.has(error.code)) return settle(new HttpFailure('unreachable', error.message, error.code, null, { cause: error }));
      settle(new HttpFailure('dropped', error.message, error.code, null, { cause: error }));
    });
    request.on('response', (response) => {
      onAnswer(request, response, (error) => settle(error));
    });
    if (body === undefined || inMemory) request.end(inMemory);
    else pipeline(createReadStream((body as FileBody).path), request).catch((error: Error) => fail(error));
  });
}

/** Send, and once more on a fresh connection if an idempotent request met a stale kept-alive one. */
async function withFreshRetry(url: URL, options: HttpRequest, run: (exchange: Exchange) => Promise<void>): Promise<void> {
  const method = (options.method ?? 'GET').toUpperCase();
  const exchange: Exchange = { ...options, url, method, fresh: false, staleRetry: options.agent !== false && (options.idempotent ?? IDEMPOTENT.has(method)) };
  try {
    await run(exchange);
  } catch (error) {
    if (!(error instanceof StaleSocket)) throw error;
    await run({ ...exchange, fresh: true, staleRetry: false });
  }
}

/** One request and its whole answer, whatever the status. */
export async function httpRequest(url: string | URL, options: HttpRequest = {}): Promise<HttpAnswer> {
  let answer: HttpAnswer | null = null;
  await withFreshRetry(new URL(url), options, (exchange) => begin(exchange, (request, response, done) => {
    const chunks: Buffer[] = [];
    let size = 0;
    response.on('data', (chunk: Buffer) => {
      size += chunk.byteLength;
      if (options.maxBytes !== undefined && size > options.maxBytes) {
        request.destroy();
        done(new HttpFailure('too-large', `the answer is larger than ${options.maxBytes} bytes`, undefined, response.statusCode ?? 0));
        return;
      }
      chunks.push(chunk);
    });
    response.on('error', () => { /* reported by 'close' with complete false */ });
    response.on('close', () => {
      if (!response.complete) {
        done(new HttpFailure('dropped', `the connection dropped in the middle of a ${response.statusCode} answer`, undefined, response.statusCode ?? 0));
        return;
      }
      const bytes = Buffer.concat(chunks);
      answer = { status: response.statusCode ?? 0, headers: response.headers, bytes, text: bytes.toString('utf8') };
      done();
    });
  }));
  return answer!;
}

/** `httpFetch`'s options: a request whose answer streams. */
export interface StreamRequest extends Omit<HttpRequest, 'timeoutMs' | 'maxBytes'> {
  /**
   * Redirects followed (a 3xx with a `location`), as fetch does: 303 (and 301/302 after a POST) becomes a GET
   * without its body; another origin gets no `authorization` and the default connection. Default 0: the redirect is
   * the answer.
   */
  redirects?: number;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** One request, answered as a WHATWG Response whose body streams (model pulls, SSE, downloads). */
export async function httpFetch(url: string | URL, options: StreamRequest = {}): Promise<Response> {
  let target = new URL(url);
  let current: StreamRequest = { idleTimeoutMs: 300_000, ...options };
  for (let left = options.redirects ?? 0; ; left--) {
    let head: http.IncomingMessage | null = null;
    await withFreshRetry(target, current, (exchange) => begin(exchange, (_request, response, done) => {
      head = response;
      done();
    }));
    const response = head as unknown as http.IncomingMessage;
    const status = response.statusCode ?? 0;
    const method = (current.method ?? 'GET').toUpperCase();
    const location = response.headers.location;
    if (left > 0 && REDIRECTS.has(status) && location) {
      response.resume();
      const next = new URL(location, target);
      const asGet = status === 303 ? method !== 'HEAD' : (status === 301 || status === 302) && method === 'POST';
      const headers = { ...current.headers };
      if (next.origin !== target.origin) {
        for (const name of Object.keys(headers)) if (/^(authorization|cookie|proxy-authorization)$/i.test(name)) delete headers[name];
      }
      if (asGet) for (const name of Object.keys(headers)) if (/^content-/i.test(name)) delete headers[name];
      current = {
        ...current, headers, ...(asGet ? { method: 'GET', body: undefined } : {}),
        ...(next.origin !== target.origin ? { agent: undefined } : {}),
      };
      target = next;
      continue;
    }
    return asResponse(response, method);
  }
}

function asResponse(response: http.IncomingMessage, method: string): Response {
  const status = response.statusCode ?? 0;
  const headers = new Headers();
  for (const [name, value] of Object.entries(response.headers)) {
    for (const item of [value ?? []].flat()) headers.append(name, item);
  }
  const empty = NULL_BODY_STATUSES.has(status) || method === 'HEAD';
  if (empty) response.resume();
  const body = empty ? null : (Readable.toWeb(response) as NodeReadableStream<Uint8Array>);
  return new Response(body as globalThis.ReadableStream<Uint8Array> | null, { status, statusText: response.statusMessage, headers });
}

/** How often and how long a request is tried again (see {@link retrying}). */
export interface RetryOptions {
  /** Attempts after the first; Infinity: until an attempt says to stop. */
  retries: number;
  /** The waits between attempts. */
  backoff: BackoffOptions;
  /** What the waits are measured on (a fake in tests). */
  clock: Clock;
  /** Aborting ends a wait at once, rejecting with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * What one attempt came to: a value, or a failure another attempt may mend (`retry`) or not. `wait` turns the
 * backoff's next delay into the wait before that attempt (a server's Retry-After); it may throw (a deadline).
 */
export type Attempt<T> = { value: T } | { failure: unknown; retry: boolean; wait?: (backoffMs: number) => number };

/**
 * Attempt until one gives a value or a failure worth no retry, or the retries are spent (its failure is thrown then);
 * between attempts the backoff's next delay, or what the attempt's `wait` makes of it.
 */
export async function retrying<T>(options: RetryOptions, attempt: (index: number) => Promise<Attempt<T>>): Promise<T> {
  const backoff = new Backoff(options.backoff);
  for (let index = 0; ; index++) {
    const outcome = await attempt(index);
    if ('value' in outcome) return outcome.value;
    if (!outcome.retry || index >= options.retries) throw outcome.failure;
    const next = backoff.next();
    await sleep(options.clock, outcome.wait ? outcome.wait(next) : next, options.signal ?? NEVER_ABORTED);
  }
}
