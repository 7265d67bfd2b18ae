import { createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createParser } from 'eventsource-parser';
import type { GrantEndedEvent, JobEvent, JobView } from '../../protocol/index.js';
import { ServerTrust, TlsPinError, pinsOfGrant, type Pin, type TrustedRequestInit } from '../../tls-client/index.js';

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
}

/** How to point the CLI at another mesh: said with every failure to reach one. */
export const WHERE_HINT = 'point the CLI at your mesh with --url <its URL>, or --data <its data folder> (or GPUMESH_HOME=<its data folder>), whose listen.json says where it listens';

/**
 * A small client for the orchestrator's HTTP API, used by the CLI, the tests and the benchmarks.
 * On an https URL it pins the CA its grant names (see ServerTrust) before sending the grant.
 */
export class MeshClient {
  readonly baseUrl: string;
  readonly #grant: string | null;
  readonly #trust: ServerTrust;
  readonly #urlSource: string | undefined;

  constructor(baseUrl: string, grant: string | null, options: MeshClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.#grant = grant;
    this.#urlSource = options.urlSource;
    this.#trust = new ServerTrust(this.baseUrl, [...pinsOfGrant(grant), ...(options.pins ?? [])]);
  }

  /** The CA this client trusts the orchestrator with (PEM), once pinned; undefined when nothing is pinned. */
  trustedCa(): Promise<string | undefined> {
    return this.#trust.ca();
  }

  /** Every request goes through here: the pin is checked first, and failures become one-line errors. */
  async #fetch(path: string, init: TrustedRequestInit): Promise<Response> {
    try {
      return await this.#trust.fetch(this.url(path), init);
    } catch (error) {
      if (error instanceof ApiError || (error as Error).name === 'AbortError') throw error;
      if (error instanceof TlsPinError) throw new ApiError(0, 'TLS_PIN_FAILED', error.message);
      const cause = this.#trust.explain(error) ?? (error as Error & { cause?: Error }).cause?.message ?? (error as Error).message;
      const from = this.#urlSource ? ` (from ${this.#urlSource})` : '';
      throw new ApiError(0, 'UNREACHABLE', `cannot reach the orchestrator at ${this.baseUrl}${from}: ${cause}. To use another mesh, ${WHERE_HINT}`);
    }
  }

  url(path: string): string {
    return new URL(path, `${this.baseUrl}/`).toString();
  }

  #headers(extra: Record<string, string> = {}): Record<string, string> {
    return this.#grant ? { authorization: `Bearer ${this.#grant}`, ...extra } : extra;
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    return this.send<T>(method, path, body === undefined ? undefined : JSON.stringify(body), body === undefined ? {} : { 'content-type': 'application/json' });
  }

  /** A request with a body as given (raw bytes: an upload's chunk) and its headers; the answer read as JSON. */
  async send<T>(method: string, path: string, body: string | Uint8Array<ArrayBuffer> | undefined, headers: Record<string, string> = {}): Promise<T> {
    const response = await this.#fetch(path, { method, headers: this.#headers(headers), body });
    const text = await response.text();
    const parsed = text ? (JSON.parse(text) as unknown) : null;
    if (!response.ok) {
      const error = (parsed as { error?: { code?: string; message?: string } } | null)?.error;
      throw new ApiError(response.status, error?.code ?? `HTTP_${response.status}`, error?.message ?? text);
    }
    return parsed as T;
  }

  submit(body: Record<string, unknown>): Promise<{ id: string; status: string; links: { self: string; events: string } }> {
    return this.request('POST', '/v1/jobs', body);
  }

  job(id: string): Promise<JobView> {
    return this.request('GET', `/v1/jobs/${encodeURIComponent(id)}`);
  }

  /** Follow one job's events until its terminal event; returns that event. */
  async follow(id: string, onEvent: (event: JobEvent) => void = () => {}, signal?: AbortSignal): Promise<JobEvent> {
    const response = await this.#fetch(`/v1/jobs/${encodeURIComponent(id)}/events`, {
      headers: this.#headers({ accept: 'text/event-stream' }), signal,
    });
    if (!response.ok || !response.body) {
      const text = await response.text();
      let message = text;
      try { message = (JSON.parse(text) as { error: { message: string } }).error.message; } catch { /* not JSON */ }
      throw new ApiError(response.status, `HTTP_${response.status}`, message);
    }
    let terminal: JobEvent | null = null;
    let grantEnded: GrantEndedEvent | null = null;
    const parser = createParser({
      onEvent: (message) => {
        if (message.event === 'grant:ended') {
          grantEnded = JSON.parse(message.data) as GrantEndedEvent;
          return;
        }
        const event = JSON.parse(message.data) as JobEvent;
        onEvent(event);
        if (['succeeded', 'failed', 'cancelled', 'expired'].includes(event.type)) terminal = event;
      },
    });
    const decoder = new TextDecoder();
    for await (const chunk of response.body) {
      parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
      if (terminal || grantEnded) break;
    }
    if (grantEnded) {
      const { error } = grantEnded as GrantEndedEvent;
      throw new ApiError(401, error.code, error.message);
    }
    if (!terminal) throw new ApiError(0, 'STREAM_ENDED', `the event stream of job ${id} ended before the job did`);
    return terminal;
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
