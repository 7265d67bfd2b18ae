import { createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { createParser } from 'eventsource-parser';
import type { GrantEndedEvent, JobAccepted, JobEvent, JobView } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';
import { ServerTrust, TlsPinError, pinsOfGrant, type Pin, type TrustedRequestInit } from '../../tls-client/index.js';
import { Backoff } from '../../net/backoff.js';
import { systemClock } from '../../protocol/clock.js';

/** An error the server returned, with its code; the CLI prints the message and exits non-zero. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

export interface MeshClientOptions {
  /** CA fingerprints to pin besides those the grant names (`--tls-ca-fingerprint`, a local mesh's ca.crt). */
  pins?: readonly Pin[];
  /** Where the URL came from (`--url`, a data folder's listen.json, the default), said when it cannot be reached. */
  urlSource?: string;
  /**
   * How long a request waits for an answer to begin (its status and headers; a body then streams for as long as it
   * takes) before the orchestrator counts as gone: default ANSWER_WITHIN_MS, more for a request with a large body.
   */
  answerWithinMs?: number;
}

/**
 * How long an answer may take to begin. An orchestrator whose cable was pulled never refuses a kept-alive
 * connection: the request goes into the socket and nothing comes back (undici would wait five minutes), so with
 * several URLs a hung request must end for the next one to be asked. Every route answers at once except a model's
 * load (which waits for the agent: models load passes its own limit).
 */
const ANSWER_WITHIN_MS = 30_000;
/** A request's body is allowed this many bytes a second on top (an 8 MB upload chunk over a slow link). */
const BODY_BYTES_PER_SECOND = 64 * 1024;

/** How to point the CLI at another mesh: said with every failure to reach one. */
const WHERE_HINT = 'point the CLI at your mesh with --url <its URL>, or --data <its data folder> (or GPUMESH_HOME=<its data folder>), whose listen.json says where it listens';

/** One orchestrator the client may send to: its base URL and how it is trusted (each serves its own CA at its own URL). */
interface Endpoint {
  url: string;
  trust: ServerTrust;
}

/**
 * Methods whose request may be sent again elsewhere after a connection broke mid-way: sending one twice does what
 * sending it once does. A POST or PATCH that may have reached an orchestrator before its connection broke is not.
 */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);

/** Error codes of a connection that was never made: nothing of the request left this machine (net/http-client.ts's CONNECT_TIMEOUT too). */
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'CONNECT_TIMEOUT']);

/** The code of a network error, wherever fetch (undici: `cause`, or an AggregateError of addresses) or node:http put it. */
function networkCode(error: unknown): string | undefined {
  for (let current = error as { code?: unknown; cause?: unknown; errors?: unknown[] } | undefined, depth = 0; current && depth < 4; depth++) {
    if (typeof current.code === 'string') return current.code;
    current = (current.cause ?? current.errors?.[0]) as typeof current;
  }
  return undefined;
}

/** The code of an answer's error envelope, read from its text; null when it has none. */
function errorCodeOf(text: string): { code: string; message: string } | null {
  try {
    const error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
    return typeof error?.code === 'string' ? { code: error.code, message: String(error.message ?? '') } : null;
  } catch {
    return null;
  }
}

/** The reason a request is aborted when its answer does not begin in time. */
class AnswerTimeout extends Error {
  override readonly name = 'AnswerTimeout';
  constructor(limitMs: number) {
    super(`no answer within ${formatSeconds(limitMs)}`);
  }
}

const formatSeconds = (ms: number): string => `${Math.round(ms / 100) / 10} s`;

/** The size of a request body this client sends (always in memory: a string or bytes). */
function bodyBytes(body: TrustedRequestInit['body']): number {
  if (typeof body === 'string') return Buffer.byteLength(body);
  return body instanceof Uint8Array ? body.byteLength : 0;
}

/** After an event stream drops, how long `follow` keeps trying the orchestrators for it (a standby takes over in seconds). */
const FOLLOW_RECONNECT_MS = 30_000;
const FOLLOW_RETRY_MIN_MS = 250;
const FOLLOW_RETRY_MAX_MS = 2000;

/**
 * A small client for the orchestrator's HTTP API, used by the CLI, the tests and the benchmarks.
 * On an https URL it pins the CA its grant names (see ServerTrust) before sending the grant.
 *
 * Given several URLs (orchestrators sharing one store: one active, the others standbys answering 503 NOT_LEADER),
 * a request that cannot connect, or that a standby refuses with NOT_LEADER, goes to the next URL in turn; the one
 * that answers is remembered, and later requests start there. Any other answer — a 4xx, a 503 with another code —
 * is the answer: the active orchestrator gave it, and another would not be asked.
 */
export class MeshClient {
  readonly #endpoints: Endpoint[];
  /** The endpoint that answered last (the first until one has): where each request starts. */
  #current = 0;
  readonly #grant: string | null;
  readonly #urlSource: string | undefined;
  readonly #answerWithinMs: number;

  constructor(baseUrl: string | readonly string[], grant: string | null, options: MeshClientOptions = {}) {
    const urls = typeof baseUrl === 'string' ? [baseUrl] : baseUrl;
    if (urls.length === 0) throw new Error('MeshClient needs at least one orchestrator URL'); // an invariant: callers parse a list first
    const pins = [...pinsOfGrant(grant), ...(options.pins ?? [])];
    this.#endpoints = urls.map((url) => {
      const base = url.replace(/\/+$/, '');
      return { url: base, trust: new ServerTrust(base, pins) };
    });
    this.#grant = grant;
    this.#urlSource = options.urlSource;
    this.#answerWithinMs = options.answerWithinMs ?? ANSWER_WITHIN_MS;
  }

  /** The orchestrator this client talks to: the one that answered last, else the first it was given. */
  get baseUrl(): string {
    return this.#endpoints[this.#current]!.url;
  }

  /** Every orchestrator URL it was given, in order. */
  get baseUrls(): string[] {
    return this.#endpoints.map((endpoint) => endpoint.url);
  }

  /** The CA this client trusts the orchestrator with (PEM), once pinned; undefined when nothing is pinned. */
  trustedCa(): Promise<string | undefined> {
    return this.#endpoints[this.#current]!.trust.ca();
  }

  /**
   * Every request goes through here: the pin is checked first, failures become one-line errors, and with several
   * URLs a request goes on to the next one when it cannot connect or a standby answers NOT_LEADER.
   *
   * Every body this client sends is in memory (a string, or bytes: an upload goes as 8 MB chunks read into a buffer,
   * never as a stream), so any request can be sent again. What limits going elsewhere is whether the first
   * orchestrator may have acted on it: a connection that was never made, or a NOT_LEADER answer, means it did not,
   * for any method; a connection that broke after it was made may have carried a POST or PATCH that was carried
   * out (a job submitted, a chunk stored), so only an idempotent method (GET, HEAD, PUT, DELETE) goes on then. An
   * answer that does not begin within the limit (answerWithinMs) counts as a connection that broke.
   */
  async #fetch(path: string, init: TrustedRequestInit, answerWithinMs = this.#answerWithinMs): Promise<Response> {
    const count = this.#endpoints.length;
    const start = this.#current;
    const method = (init.method ?? 'GET').toUpperCase();
    const tried: string[] = [];
    let standbys = 0;
    let headAnswer: Response | null = null;
    for (let step = 0; step < count; step++) {
      const index = (start + step) % count;
      const endpoint = this.#endpoints[index]!;
      let response: Response;
      const limit = answerWithinMs + Math.ceil((1000 * bodyBytes(init.body)) / BODY_BYTES_PER_SECOND);
      const silence = new AbortController();
      const timer = setTimeout(() => silence.abort(new AnswerTimeout(limit)), limit);
      try {
        const signal = init.signal ? AbortSignal.any([init.signal, silence.signal]) : silence.signal;
        response = await endpoint.trust.fetch(new URL(path, `${endpoint.url}/`), { ...init, signal });
      } catch (error) {
        if (error instanceof ApiError || init.signal?.aborted) throw error;
        if (silence.signal.aborted) {
          const late = `no answer within ${formatSeconds(limit)}`;
          if (count === 1 || !IDEMPOTENT.has(method)) {
            throw new ApiError(0, 'UNREACHABLE', `the orchestrator at ${endpoint.url} sent ${late} to ${method} ${path}`
              + (IDEMPOTENT.has(method) ? '' : '; it was not sent to another orchestrator, since this one may have carried it out: check before trying again')
              + (count === 1 ? `. If it is gone, ${WHERE_HINT}` : ''));
          }
          tried.push(`${endpoint.url}: ${late}`);
          continue;
        }
        if ((error as Error).name === 'AbortError') throw error;
        // A CA that is not the pinned one is not an orchestrator of this mesh, or an impostor: said, never skipped.
        if (error instanceof TlsPinError) throw new ApiError(0, 'TLS_PIN_FAILED', error.message);
        const cause = endpoint.trust.explain(error) ?? (error as Error & { cause?: Error }).cause?.message ?? (error as Error).message;
        if (count === 1) {
          const from = this.#urlSource ? ` (from ${this.#urlSource})` : '';
          throw new ApiError(0, 'UNREACHABLE', `cannot reach the orchestrator at ${endpoint.url}${from}: ${cause}. To use another mesh, ${WHERE_HINT}`);
        }
        // No TLS session, no pinned CA, no connection: nothing of the request was sent.
        const unsent = NOT_CONNECTED.has(networkCode(error) ?? '') || endpoint.trust.explain(error) !== null
          || (error instanceof MeshError && error.code === 'TLS_CA_UNAVAILABLE');
        if (!unsent && !IDEMPOTENT.has(method)) {
          throw new ApiError(0, 'UNREACHABLE', `the connection to the orchestrator at ${endpoint.url} broke during ${method} ${path} (${cause}); `
            + 'it was not sent to another orchestrator, since this one may have carried it out: check before trying again');
        }
        tried.push(`${endpoint.url}: cannot connect (${cause})`);
        continue;
      } finally {
        // Only the answer's beginning is timed: its body (an event stream, a clip) streams for as long as it takes.
        clearTimeout(timer);
      }
      if (response.status === 503) {
        if (method === 'HEAD') {
          // An answer to HEAD has no body to say whether it came from a standby; asking the next is harmless (HEAD
          // does nothing), and if none answers otherwise, this answer is the one.
          if (count > 1) {
            headAnswer ??= response;
            tried.push(`${endpoint.url}: HTTP 503 to HEAD`);
            continue;
          }
        } else {
          // The envelope says whether this is a standby; reading it uses the body up, so an answer kept is rebuilt.
          const text = await response.text();
          const error = errorCodeOf(text);
          if (error?.code === 'NOT_LEADER') {
            standbys++;
            tried.push(`${endpoint.url}: NOT_LEADER (${error.message})`);
            continue;
          }
          response = new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
        }
      }
      this.#current = index;
      return response;
    }
    if (headAnswer) return headAnswer;
    const from = this.#urlSource ? ` (from ${this.#urlSource})` : '';
    const urls = count === 1 ? `the orchestrator${from}` : `any of the ${count} orchestrators${from}`;
    if (standbys > 0) {
      throw new ApiError(503, 'NOT_LEADER', `no active orchestrator at ${urls}: ${tried.join('; ')}. `
        + 'A standby takes over within seconds when the active one stops: try again shortly, or add the active one\'s URL to --url');
    }
    throw new ApiError(0, 'UNREACHABLE', `cannot reach ${urls}: ${tried.join('; ')}. To use another mesh, ${WHERE_HINT}`);
  }

  /** A path of the orchestrator that answered last, as a full URL (printed for people: a job's link, an artifact's). */
  url(path: string): string {
    return new URL(path, `${this.baseUrl}/`).toString();
  }

  #headers(extra: Record<string, string> = {}): Record<string, string> {
    return this.#grant ? { authorization: `Bearer ${this.#grant}`, ...extra } : extra;
  }

  /** A JSON request; `options.answerWithinMs` for a route that answers only once something slow happened (a model's load). */
  async request<T>(method: string, path: string, body?: unknown, options: { answerWithinMs?: number } = {}): Promise<T> {
    return this.send<T>(method, path, body === undefined ? undefined : JSON.stringify(body), body === undefined ? {} : { 'content-type': 'application/json' }, options);
  }

  /** A request with a body as given (raw bytes: an upload's chunk) and its headers; the answer read as JSON. */
  async send<T>(
    method: string, path: string, body: string | Uint8Array<ArrayBuffer> | undefined, headers: Record<string, string> = {}, options: { answerWithinMs?: number } = {},
  ): Promise<T> {
    const response = await this.#fetch(path, { method, headers: this.#headers(headers), body }, options.answerWithinMs);
    const text = await response.text();
    const parsed = text ? (JSON.parse(text) as unknown) : null;
    if (!response.ok) {
      const error = (parsed as { error?: { code?: string; message?: string } } | null)?.error;
      throw new ApiError(response.status, error?.code ?? `HTTP_${response.status}`, error?.message ?? text);
    }
    return parsed as T;
  }

  submit(body: Record<string, unknown>): Promise<JobAccepted> {
    return this.request('POST', '/v1/jobs', body);
  }

  job(id: string): Promise<JobView> {
    return this.request('GET', `/v1/jobs/${encodeURIComponent(id)}`);
  }

  /**
   * Follow one job's events until its terminal event; returns that event. When the stream drops before it (the
   * orchestrator went away), or cannot be opened, it is opened again — at the next URL first, for the one that
   * dropped may be gone, each tried in turn for up to FOLLOW_RECONNECT_MS — with `Last-Event-ID` naming the last
   * event heard. The job's stream
   * starts with a snapshot of where the job stands (its `queued` event, then where it runs), so after a reconnect
   * `onEvent` may hear an event again.
   */
  async follow(id: string, onEvent: (event: JobEvent) => void = () => {}, signal?: AbortSignal): Promise<JobEvent> {
    const path = `/v1/jobs/${encodeURIComponent(id)}/events`;
    // Set by the stream reader as events arrive (an object, so the loop sees what the callback wrote).
    const heard: { lastEventId: string | null } = { lastEventId: null };
    let droppedAt: number | null = null;
    const retry = new Backoff({ initialMs: FOLLOW_RETRY_MIN_MS, maxMs: FOLLOW_RETRY_MAX_MS });
    for (;;) {
      let response: Response;
      try {
        const headers: Record<string, string> = { accept: 'text/event-stream' };
        if (heard.lastEventId !== null) headers['last-event-id'] = heard.lastEventId;
        response = await this.#fetch(path, { headers: this.#headers(headers), signal });
      } catch (error) {
        // The job exists, so its mesh was there moments ago: one that cannot be reached now, or has only standbys, is
        // waited for (an orchestrator restarting, a standby taking over), from the first try — the orchestrator may
        // have died between the submit and this request.
        const away = error instanceof ApiError && (error.code === 'UNREACHABLE' || error.code === 'NOT_LEADER');
        droppedAt ??= systemClock.now();
        if (!away || systemClock.now() - droppedAt > FOLLOW_RECONNECT_MS) throw error;
        await sleep(retry.next(), undefined, { signal });
        continue;
      }
      if (!response.ok || !response.body) {
        const text = await response.text();
        let message = text;
        try { message = (JSON.parse(text) as { error: { message: string } }).error.message; } catch { /* not JSON */ }
        throw new ApiError(response.status, `HTTP_${response.status}`, message);
      }
      const read = await readJobEvents(response.body, onEvent, (eventId) => (heard.lastEventId = eventId), signal);
      if (read.terminal) return read.terminal;
      if (read.grantEnded) throw new ApiError(401, read.grantEnded.error.code, read.grantEnded.error.message);
      // The stream ended, or broke, before the job did: open it again, starting with the next orchestrator. The time
      // allowed counts from the first drop after a stream that said something, so a stream that keeps opening and
      // ending at once gives up, and one that ran for a while gets the whole window again.
      if (read.events > 0 || droppedAt === null) droppedAt = systemClock.now();
      else if (systemClock.now() - droppedAt > FOLLOW_RECONNECT_MS) {
        throw new ApiError(0, 'STREAM_ENDED', `the event stream of job ${id} ended before the job did${read.error ? ` (${read.error})` : ''}`);
      }
      retry.reset();
      this.#current = (this.#current + 1) % this.#endpoints.length;
      await sleep(FOLLOW_RETRY_MIN_MS, undefined, { signal });
    }
  }

  async download(path: string): Promise<Uint8Array> {
    const response = await this.#fetch(path, { headers: this.#headers() });
    if (!response.ok) throw new ApiError(response.status, `HTTP_${response.status}`, await response.text());
    return new Uint8Array(await response.arrayBuffer());
  }

  /** Save a blob to a file as it arrives (a clip is not held in memory whole). */
  async downloadTo(path: string, file: string): Promise<void> {
    const response = await this.#fetch(path, { headers: this.#headers() });
    if (!response.ok || !response.body) throw new ApiError(response.status, `HTTP_${response.status}`, await response.text());
    await pipeline(Readable.fromWeb(response.body as import('node:stream/web').ReadableStream), createWriteStream(file));
  }
}

/** How one event stream of a job ended: its terminal event, the grant ending, or neither (it dropped, and why). */
interface JobStreamEnd {
  /** Events it delivered. */
  events: number;
  terminal: JobEvent | null;
  grantEnded: GrantEndedEvent | null;
  error: string | null;
}

/** Read a job's event stream until its terminal event, its grant ending, or the stream ending or breaking. */
async function readJobEvents(
  body: ReadableStream<Uint8Array>, onEvent: (event: JobEvent) => void, onId: (id: string) => void, signal: AbortSignal | undefined,
): Promise<JobStreamEnd> {
  const end: JobStreamEnd = { events: 0, terminal: null, grantEnded: null, error: null };
  const parser = createParser({
    onEvent: (message) => {
      end.events++;
      if (message.id) onId(message.id);
      if (message.event === 'grant:ended') {
        end.grantEnded = JSON.parse(message.data) as GrantEndedEvent;
        return;
      }
      if (message.event === 'resync') return; // only /v1/events sends it; a job's stream starts with its snapshot anyway
      const event = JSON.parse(message.data) as JobEvent;
      onEvent(event);
      if (['succeeded', 'failed', 'cancelled', 'expired'].includes(event.type)) end.terminal = event;
    },
  });
  const decoder = new TextDecoder();
  const chunks = body[Symbol.asyncIterator]();
  for (;;) {
    let next: IteratorResult<Uint8Array>;
    try {
      next = await chunks.next();
    } catch (error) {
      // The connection broke mid-stream (undici: "terminated"): the caller reconnects. An abort is the caller's own.
      if (signal?.aborted) throw error;
      end.error = (error as Error & { cause?: Error }).cause?.message ?? (error as Error).message;
      return end;
    }
    if (next.done) return end;
    // Outside the try: an error of onEvent's is the caller's, not a dropped stream.
    parser.feed(decoder.decode(next.value, { stream: true }));
    if (end.terminal || end.grantEnded) {
      await chunks.return?.();
      return end;
    }
  }
}
