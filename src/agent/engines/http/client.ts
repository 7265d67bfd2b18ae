import http from 'node:http';
import https from 'node:https';
import { formatError } from '../../../protocol/index.js';
import { EngineError } from '../engine.js';

export interface HttpRequest {
  method: 'GET' | 'POST';
  url: string;
  /** Sent as JSON. */
  body?: unknown;
  headers?: Record<string, string>;
  /** Aborting rejects with the signal's reason (a cancel or a deadline), and closes the connection. */
  signal: AbortSignal;
  /** No complete answer within this long is an `ENGINE_FAILED` (retryable). */
  timeoutMs: number;
}

export interface HttpReply {
  status: number;
  headers: http.IncomingHttpHeaders;
  bytes: Buffer;
  text: string;
  /** The body parsed as JSON; undefined when it is empty or not JSON. */
  json: unknown;
}

/** Connection errors that mean nothing reached a server. */
const CONNECT_FAILURES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL']);

const unreachable = (url: string, detail: string, cause?: unknown): EngineError =>
  new EngineError('ENGINE_UNREACHABLE', formatError('ENGINE_UNREACHABLE', { url: new URL(url).origin, detail }), true, { cause });

/**
 * One JSON request over node:http. Not fetch: its built-in five-minute header and body timeouts
 * would cut off a synchronous generation that takes longer, and it reports a connection dropped
 * mid-answer no differently from one never made. Here every failure is an {@link EngineError}:
 * `ENGINE_UNREACHABLE` when nothing answered or the answer was cut off, `ENGINE_FAILED` on a timeout.
 */
export async function request(options: HttpRequest): Promise<HttpReply> {
  try {
    return await attempt(options, false);
  } catch (error) {
    // A keep-alive socket the server closed while idle fails the next request before it is sent;
    // Node's documentation recommends exactly one retry on a fresh connection.
    if (error instanceof StaleSocket) return attempt(options, true);
    throw error;
  }
}

class StaleSocket extends Error {}

function attempt(options: HttpRequest, freshSocket: boolean): Promise<HttpReply> {
  const { signal, url } = options;
  if (signal.aborted) return Promise.reject(signal.reason);
  const target = new URL(url);
  const transport = target.protocol === 'https:' ? https : http;
  const payload = options.body === undefined ? undefined : Buffer.from(JSON.stringify(options.body));
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
      method: options.method,
      headers: {
        accept: 'application/json',
        ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
        ...options.headers,
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
      reject(new EngineError('ENGINE_FAILED', `${options.method} ${target.pathname} on ${target.origin} gave no complete answer within ${options.timeoutMs} ms`, true));
    }), options.timeoutMs);

    req.on('error', (error: NodeJS.ErrnoException) => settle(() => {
      if (req.reusedSocket && !freshSocket && (error.code === 'ECONNRESET' || error.code === 'EPIPE')) return reject(new StaleSocket());
      if (error.code && CONNECT_FAILURES.has(error.code)) return reject(unreachable(url, `could not connect (${error.code})`, error));
      reject(unreachable(url, `${options.method} ${target.pathname}: the connection closed before an answer (${error.code ?? error.message})`, error));
    }));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', () => { /* reported by 'close' with res.complete false */ });
      res.on('close', () => settle(() => {
        if (!res.complete) {
          return reject(unreachable(url, `${options.method} ${target.pathname}: the connection dropped in the middle of a ${res.statusCode} answer`));
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
