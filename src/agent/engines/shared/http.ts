/** The server could not be reached, the connection dropped, or it did not answer in time. */
export class ServerUnreachableError extends Error {
  override readonly name = 'ServerUnreachableError';
  constructor(readonly server: string, readonly detail: string, options?: { cause?: unknown }) {
    super(`${server} is unreachable: ${detail}`, options);
  }
}

/** The server answered with an error status; `serverMessage` is what it said. */
export class ServerStatusError extends Error {
  override readonly name = 'ServerStatusError';
  constructor(readonly server: string, readonly status: number, readonly serverMessage: string, readonly body: unknown) {
    super(`${server} answered ${status}: ${serverMessage}`);
  }

  /** 429 and 503 mean "busy, come back"; 5xx may be another replica's to fix. */
  get busy(): boolean {
    return this.status === 429 || this.status === 503;
  }
}

/** The server answered 2xx with something that is not what the protocol says (e.g. not JSON). */
export class ServerProtocolError extends Error {
  override readonly name = 'ServerProtocolError';
  constructor(readonly server: string, readonly detail: string, options?: { cause?: unknown }) {
    super(`${server} broke the protocol: ${detail}`, options);
  }
}

export interface HttpOptions {
  /** How errors name the server, e.g. `ComfyUI at http://127.0.0.1:8188`. */
  label: string;
  /** Per-request limit. */
  timeoutMs: number;
  /** Attempts after the first for 429/503 answers (and dropped connections of idempotent requests). */
  retries: number;
  /** Longest wait between attempts, whatever Retry-After says. */
  maxRetryDelayMs: number;
}

export interface RequestOptions {
  json?: unknown;
  body?: Uint8Array<ArrayBuffer>;
  headers?: Record<string, string>;
  /** Safe to send again after a dropped connection (reads, stateless inference). */
  idempotent?: boolean;
  signal?: AbortSignal;
  timeoutMs?: number;
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
});

/** What a server's error body says: `{error: "…"}` (OIP), `{error: {message, details}}` (ComfyUI) or text. */
export function errorMessageOf(body: unknown, fallback: string): string {
  if (typeof body === 'string') return body.trim().slice(0, 500) || fallback;
  if (body && typeof body === 'object' && 'error' in body) {
    const error = (body as { error: unknown }).error;
    if (typeof error === 'string') return error;
    if (error && typeof error === 'object') {
      const { message, details } = error as { message?: unknown; details?: unknown };
      if (typeof message === 'string') return details ? `${message}: ${String(details)}` : message;
    }
  }
  return fallback;
}

/**
 * A small HTTP client for one engine server: per-request timeouts, bounded
 * retries of "busy" answers (honouring Retry-After up to a cap) and one error
 * class per failure for callers to branch on — unreachable, an error status
 * with the server's own message, or an answer that breaks the protocol.
 */
export class ServerHttp {
  readonly baseUrl: string;
  readonly #options: HttpOptions;

  constructor(baseUrl: string, options: HttpOptions) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.#options = options;
  }

  get label(): string {
    return this.#options.label;
  }

  /** A request whose answer is JSON (or empty). */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.request(method, path, options);
    const text = await response.text();
    if (!text) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (error) {
      throw new ServerProtocolError(this.label, `${method} ${path} answered with invalid JSON`, { cause: error });
    }
  }

  /** A request whose answer carries nothing we need (the body is read and dropped, so the connection is reused). */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<void> {
    const response = await this.request(method, path, options);
    await response.arrayBuffer().catch(() => undefined);
  }

  /** A request; resolves with a 2xx response, throws ServerUnreachableError or ServerStatusError otherwise. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { ...options.headers };
    let body: Uint8Array<ArrayBuffer> | string | undefined = options.body;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers['content-type'] ??= 'application/json';
    }
    for (let attempt = 0; ; attempt++) {
      const last = attempt >= this.#options.retries;
      const timeout = AbortSignal.timeout(options.timeoutMs ?? this.#options.timeoutMs);
      const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
      let response: Response;
      try {
        response = await fetch(`${this.baseUrl}${path}`, { method, headers, body, signal });
      } catch (error) {
        if (options.signal?.aborted) throw error;
        const detail = timeout.aborted ? `${method} ${path} took longer than ${options.timeoutMs ?? this.#options.timeoutMs} ms` : describeFetchError(error);
        if (!last && options.idempotent) {
          await sleep(this.#backoff(attempt, null), options.signal);
          continue;
        }
        throw new ServerUnreachableError(this.label, detail, { cause: error });
      }
      if (response.ok) return response;
      const text = await response.text().catch(() => '');
      let parsed: unknown = text;
      try { parsed = text ? JSON.parse(text) : text; } catch { /* not JSON: keep the text */ }
      const error = new ServerStatusError(this.label, response.status, errorMessageOf(parsed, response.statusText || `HTTP ${response.status}`), parsed);
      if (!last && error.busy) {
        await sleep(this.#backoff(attempt, response.headers.get('retry-after')), options.signal);
        if (options.signal?.aborted) throw error;
        continue;
      }
      throw error;
    }
  }

  #backoff(attempt: number, retryAfter: string | null): number {
    const told = retryAfter !== null && retryAfter.trim() !== '' ? Number(retryAfter) * 1000 : NaN;
    const wait = Number.isFinite(told) ? told : 100 * 2 ** attempt;
    return Math.max(0, Math.min(wait, this.#options.maxRetryDelayMs));
  }
}

/** fetch wraps the socket error in `cause`; that is the part worth reading. */
function describeFetchError(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  if (cause?.code) return `${cause.code}${cause.message ? ` (${cause.message})` : ''}`;
  return (error as Error).message ?? String(error);
}
