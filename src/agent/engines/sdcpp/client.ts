import type { Clock } from '../../../protocol/clock.js';
import { EngineError } from '../engine.js';
import { retryWhileBusy } from '../http/busy.js';
import { request, type HttpReply } from '../http/client.js';
import { badReply, errorForStatus, type RequestContext } from '../http/errors.js';
import { sleep } from '../../../protocol/clock.js';
import { Backoff } from '../http/timing.js';
import type { ServerEndpoint } from '../shared/endpoint.js';
import type { SdcppSettings } from '../../../protocol/engines/sdcpp.js';
import { Capabilities, JobState, Metrics, Submitted, Txt2ImgReply } from './wire.js';
import type { z } from 'zod';

const NEVER = new AbortController().signal;
const isOk = (reply: HttpReply): boolean => reply.status >= 200 && reply.status < 300;

/** Which API a server speaks, found at load. */
export type SdcppApi = { kind: 'native'; capabilities: Capabilities } | { kind: 'sdapi' };

/**
 * The HTTP calls to one sd-server, each turning the server's answer into data or an
 * {@link EngineError}. Stateless apart from the endpoint, whose URL it reads on every call.
 */
export class SdcppClient {
  readonly #endpoint: ServerEndpoint;
  readonly #settings: SdcppSettings;
  readonly #clock: Clock;
  readonly #model: string;

  constructor(deps: { endpoint: ServerEndpoint; settings: SdcppSettings; clock: Clock; model: string }) {
    this.#endpoint = deps.endpoint;
    this.#settings = deps.settings;
    this.#clock = deps.clock;
    this.#model = deps.model;
  }

  get url(): string {
    return this.#endpoint.url;
  }

  /**
   * Wait until the server answers (it may still be loading its model: sd-server listens only
   * once loaded), then pick the API: native when capabilities answer, A1111 on a 404.
   */
  async probe(): Promise<SdcppApi> {
    const { api, loadTimeoutMs } = this.#settings;
    const path = api === 'sdapi' ? '/sdapi/v1/options' : '/sdcpp/v1/capabilities';
    const reply = await this.#untilAnswered(path, loadTimeoutMs);
    if (api === 'sdapi') {
      if (reply.status >= 500) throw errorForStatus(reply, this.#context('GET', path));
      return { kind: 'sdapi' };
    }
    if (reply.status === 404) {
      if (api === 'native') {
        throw new EngineError('ENGINE_FAILED', `${new URL(this.url).origin} has no native sd.cpp API (GET ${path} answered 404) and settings.api is "native"`, false);
      }
      return { kind: 'sdapi' };
    }
    if (!isOk(reply)) throw errorForStatus(reply, this.#context('GET', path));
    return { kind: 'native', capabilities: this.#parse(Capabilities, reply, this.#context('GET', path)) };
  }

  /** The model's memory by the server's own count (`--metrics`), or null when it does not say. */
  async modelMemoryMB(): Promise<number | null> {
    try {
      const reply = await request({
        method: 'GET', url: `${this.url}/metrics`, headers: { accept: 'application/json' }, signal: NEVER, timeoutMs: 5000,
      });
      if (!isOk(reply)) return null;
      const bytes = Metrics.safeParse(reply.json).data?.model_memory?.total_bytes;
      return bytes && bytes > 0 ? Math.ceil(bytes / (1024 * 1024)) : null;
    } catch {
      return null;
    }
  }

  /** `POST /sdcpp/v1/img_gen`, again while the queue is full (429), until the job's deadline. */
  async submit(body: Record<string, unknown>, signal: AbortSignal, deadlineAt: number): Promise<string> {
    const context = this.#context('POST', '/sdcpp/v1/img_gen');
    const reply = await retryWhileBusy(
      () => request({ method: 'POST', url: `${this.url}/sdcpp/v1/img_gen`, body, signal, timeoutMs: this.#settings.requestTimeoutMs }),
      { clock: this.#clock, signal, deadlineAt, backoff: this.#settings.busyBackoff, url: this.url },
    );
    if (!isOk(reply)) throw errorForStatus(reply, context);
    return this.#parse(Submitted, reply, context).id;
  }

  /** `GET /sdcpp/v1/jobs/{id}`; a failed connection is tried again `pollRetries` times (a poll is safe to repeat). */
  async job(id: string, signal: AbortSignal): Promise<JobState> {
    const path = `/sdcpp/v1/jobs/${encodeURIComponent(id)}`;
    const context = this.#context('GET', path);
    const retry = new Backoff(this.#settings.poll);
    for (let attempt = 0; ; attempt++) {
      let reply: HttpReply;
      try {
        reply = await request({ method: 'GET', url: `${this.url}${path}`, signal, timeoutMs: this.#settings.requestTimeoutMs });
      } catch (error) {
        if (!(error instanceof EngineError && error.code === 'ENGINE_UNREACHABLE') || attempt >= this.#settings.pollRetries) throw error;
        await sleep(this.#clock, retry.next(), signal);
        continue;
      }
      if (reply.status === 404 || reply.status === 410) {
        throw new EngineError('ENGINE_FAILED', `${new URL(this.url).origin} no longer knows job ${id} (${reply.status}): did the server restart?`, true);
      }
      if (!isOk(reply)) throw errorForStatus(reply, context);
      return this.#parse(JobState, reply, context);
    }
  }

  /**
   * `POST /sdcpp/v1/jobs/{id}/cancel`. Best effort: sd-server cancels a queued job (200) but answers
   * 409 for one it is generating, which then runs to its end while the agent has moved on.
   */
  async cancel(id: string): Promise<{ status: number; message: string }> {
    try {
      const reply = await request({ method: 'POST', url: `${this.url}/sdcpp/v1/jobs/${encodeURIComponent(id)}/cancel`, body: {}, signal: NEVER, timeoutMs: 5000 });
      return { status: reply.status, message: reply.text.slice(0, 200) };
    } catch (error) {
      return { status: 0, message: (error as Error).message };
    }
  }

  /** `POST /sdapi/v1/txt2img`: synchronous, one image; 429 handled as for submissions. */
  async txt2img(body: Record<string, unknown>, signal: AbortSignal, deadlineAt: number): Promise<string> {
    const context = this.#context('POST', '/sdapi/v1/txt2img');
    const reply = await retryWhileBusy(
      () => request({ method: 'POST', url: `${this.url}/sdapi/v1/txt2img`, body, signal, timeoutMs: this.#settings.requestTimeoutMs }),
      { clock: this.#clock, signal, deadlineAt, backoff: this.#settings.busyBackoff, url: this.url },
    );
    if (!isOk(reply)) throw errorForStatus(reply, context);
    return this.#parse(Txt2ImgReply, reply, context).images[0]!;
  }

  /** GET `path` until any HTTP answer comes, or fail with the last connection error once `timeoutMs` has passed. */
  async #untilAnswered(path: string, timeoutMs: number): Promise<HttpReply> {
    const giveUpAt = this.#clock.now() + timeoutMs;
    const backoff = new Backoff({ initialMs: 100, maxMs: 2000, factor: 2 });
    for (;;) {
      try {
        const reply = await request({ method: 'GET', url: `${this.url}${path}`, signal: NEVER, timeoutMs: Math.min(timeoutMs, 30_000) });
        // 503: up, but still loading (servers in front of sd.cpp say so); keep waiting.
        if (reply.status !== 503) return reply;
        if (this.#clock.now() >= giveUpAt) throw errorForStatus(reply, this.#context('GET', path));
      } catch (error) {
        if (!(error instanceof EngineError && error.code === 'ENGINE_UNREACHABLE') || this.#clock.now() >= giveUpAt) throw error;
      }
      await sleep(this.#clock, Math.min(backoff.next(), Math.max(1, giveUpAt - this.#clock.now())), NEVER);
    }
  }

  #context(method: string, path: string): RequestContext {
    return { model: this.#model, url: this.url, what: `${method} ${path}` };
  }

  #parse<T extends z.ZodType>(schema: T, reply: HttpReply, context: RequestContext): z.output<T> {
    const parsed = schema.safeParse(reply.json);
    if (parsed.success) return parsed.data;
    const issues = parsed.error.issues.slice(0, 3).map((issue) => `${issue.path.join('.') || 'body'}: ${issue.message}`).join('; ');
    throw badReply(context, `${reply.status} ${issues} (${reply.text.slice(0, 120)})`);
  }
}
