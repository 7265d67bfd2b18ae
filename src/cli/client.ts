import { createParser } from 'eventsource-parser';
import type { GrantEndedEvent, JobEvent, JobView } from '../protocol/index.js';

/** An error the server returned, with its code; the CLI prints the message and exits non-zero. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

/** A small client for the orchestrator's HTTP API, used by the CLI, the tests and the benchmarks. */
export class MeshClient {
  readonly baseUrl: string;
  readonly #grant: string | null;

  constructor(baseUrl: string, grant: string | null) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.#grant = grant;
  }

  url(path: string): string {
    return new URL(path, `${this.baseUrl}/`).toString();
  }

  #headers(extra: Record<string, string> = {}): Record<string, string> {
    return this.#grant ? { authorization: `Bearer ${this.#grant}`, ...extra } : extra;
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    let response: Response;
    try {
      response = await fetch(this.url(path), {
        method,
        headers: this.#headers(body === undefined ? {} : { 'content-type': 'application/json' }),
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      throw new ApiError(0, 'UNREACHABLE', `cannot reach the orchestrator at ${this.baseUrl}: ${(error as Error & { cause?: Error }).cause?.message ?? (error as Error).message}`);
    }
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
    const response = await fetch(this.url(`/v1/jobs/${encodeURIComponent(id)}/events`), {
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
    const response = await fetch(this.url(path), { headers: this.#headers() });
    if (!response.ok) throw new ApiError(response.status, `HTTP_${response.status}`, await response.text());
    return new Uint8Array(await response.arrayBuffer());
  }
}
