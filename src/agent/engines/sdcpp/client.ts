import type { Clock } from '../../../protocol/clock.js';
import { EngineError } from '../../core/engine.js';
import { ServerHttp, untilDeadline } from '../kit/http.js';
import { ServerError } from '../kit/server-error.js';
import type { ServerEndpoint } from '../kit/endpoint.js';
import type { SdcppSettings } from '../../../protocol/engines/sdcpp.js';
import { Capabilities, JobState, Metrics, Submitted, Txt2ImgReply } from './wire.js';

/** Which API a server speaks, found at load. */
export type SdcppApi = { kind: 'native'; capabilities: Capabilities } | { kind: 'sdapi' };

/**
 * The HTTP calls to one sd-server, each turning the server's answer into data or an
 * {@link EngineError}. Stateless apart from the endpoint, whose URL it reads on every call.
 */
export class SdcppClient {
  readonly #http: ServerHttp;
  readonly #settings: SdcppSettings;

  constructor(deps: { endpoint: ServerEndpoint; settings: SdcppSettings; clock: Clock; model: string }) {
    this.#http = new ServerHttp({ server: deps.endpoint, model: deps.model, timeoutMs: deps.settings.requestTimeoutMs, clock: deps.clock });
    this.#settings = deps.settings;
  }

  get url(): string {
    return this.#http.url;
  }

  /**
   * Wait until the server answers (it may still be loading its model: sd-server listens only
   * once loaded), then pick the API: native when capabilities answer, A1111 on a 404.
   */
  async probe(): Promise<SdcppApi> {
    const { api, loadTimeoutMs } = this.#settings;
    const path = api === 'sdapi' ? '/sdapi/v1/options' : '/sdcpp/v1/capabilities';
    // sd-server listens only once its model is loaded; servers in front of sd.cpp answer 503 while it loads.
    const answer = await this.#http.untilAnswered(path, loadTimeoutMs);
    if (api === 'sdapi') {
      if (answer instanceof ServerError && answer.status! >= 500) throw answer;
      return { kind: 'sdapi' };
    }
    if (answer instanceof ServerError) {
      if (answer.status !== 404) throw answer;
      if (api === 'native') {
        throw new EngineError('ENGINE_FAILED', `${new URL(this.url).origin} has no native sd.cpp API (GET ${path} answered 404) and settings.api is "native"`, false);
      }
      return { kind: 'sdapi' };
    }
    return { kind: 'native', capabilities: this.#http.read(answer, `GET ${path}`, Capabilities) };
  }

  /** The model's memory by the server's own count (`--metrics`), or null when it does not say. */
  async modelMemoryMB(): Promise<number | null> {
    try {
      const bytes = (await this.#http.json('GET', '/metrics', { schema: Metrics, timeoutMs: 5000 })).model_memory?.total_bytes;
      return bytes && bytes > 0 ? Math.ceil(bytes / (1024 * 1024)) : null;
    } catch {
      return null;
    }
  }

  /** `POST /sdcpp/v1/img_gen`, again while the queue is full (429), until the job's deadline. */
  async submit(body: Record<string, unknown>, signal: AbortSignal, deadlineAt: number): Promise<string> {
    const retry = untilDeadline(this.#settings.busyBackoff, deadlineAt);
    return (await this.#http.json('POST', '/sdcpp/v1/img_gen', { json: body, signal, retry, schema: Submitted })).id;
  }

  /** `GET /sdcpp/v1/jobs/{id}`; a failed connection is tried again `pollRetries` times (a poll is safe to repeat). */
  async job(id: string, signal: AbortSignal): Promise<JobState> {
    const retry = { retries: this.#settings.pollRetries, busy: [], backoff: this.#settings.poll };
    try {
      return await this.#http.json('GET', `/sdcpp/v1/jobs/${encodeURIComponent(id)}`, { signal, retry, schema: JobState });
    } catch (error) {
      if (error instanceof ServerError && (error.status === 404 || error.status === 410)) {
        throw new EngineError('ENGINE_FAILED', `${new URL(this.url).origin} no longer knows job ${id} (${error.status}): did the server restart?`, true);
      }
      throw error;
    }
  }

  /**
   * `POST /sdcpp/v1/jobs/{id}/cancel`. Best effort: sd-server cancels a queued job (200) but answers
   * 409 for one it is generating, which then runs to its end while the agent has moved on.
   */
  async cancel(id: string): Promise<{ status: number; message: string }> {
    try {
      const reply = await this.#http.request('POST', `/sdcpp/v1/jobs/${encodeURIComponent(id)}/cancel`, { json: {}, timeoutMs: 5000 });
      return { status: reply.status, message: reply.text.slice(0, 200) };
    } catch (error) {
      if (error instanceof ServerError && error.status !== null) return { status: error.status, message: error.detail.slice(0, 200) };
      return { status: 0, message: (error as Error).message };
    }
  }

  /** `POST /sdapi/v1/txt2img`: synchronous, one image; 429 handled as for submissions. */
  async txt2img(body: Record<string, unknown>, signal: AbortSignal, deadlineAt: number): Promise<string> {
    const retry = untilDeadline(this.#settings.busyBackoff, deadlineAt);
    return (await this.#http.json('POST', '/sdapi/v1/txt2img', { json: body, signal, retry, schema: Txt2ImgReply })).images[0]!;
  }

  /** An answer to `what` that is not what the protocol promises (an image that is not a PNG). */
  unexpected(what: string, detail: string): ServerError {
    return this.#http.unexpected(what, detail);
  }
}
