import { pino, type Logger } from 'pino';
import type { Clock } from '../../../protocol/clock.js';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import { NEVER, EngineError, type Engine, type EngineJob, type JobOutput, type LoadedModel, type OutputFile, type Progress, type BatchResult } from '../engine.js';
import { JobBatch, type JobContext } from '../http/batch.js';
import { retryWhileBusy } from '../http/busy.js';
import { request, type HttpReply } from '../http/client.js';
import { resolveEndpoint, watchServer, type EndpointProvider, type ServerEndpoint } from '../shared/endpoint.js';
import { badReply, errorForStatus, type RequestContext } from '../http/errors.js';
import { imageRequest, manifestParam, type RequestDefaults } from '../http/image-input.js';
import { checkedPng, pngFromBase64 } from '../http/png.js';
import { parseSettings } from '../shared/settings.js';
import { sleep, workClock } from '../../../protocol/clock.js';
import { Backoff } from '../http/timing.js';
import { openAiImagesDescriptor, OpenAiImagesSettings } from '../../../protocol/engines/openai-images.js';
import { GenerationsReply, generationsBody } from './wire.js';

export interface OpenAiImagesEngineOptions {
  /** Starts a server for a model whose settings name no `url`. */
  endpoints?: EndpointProvider;
  /** Where `settings.apiKeyEnv` is looked up. Default: process.env. */
  env?: NodeJS.ProcessEnv;
  clock?: Clock;
  log?: Logger;
}

const NEVER_ABORTED = new AbortController().signal;
const isOk = (reply: HttpReply): boolean => reply.status >= 200 && reply.status < 300;

/**
 * Any server with OpenAI's image API as a gpumesh engine: one synchronous
 * `POST /v1/images/generations` per job (`n: 1`, `size: "WxH"`, base64 answer). The API reports
 * no steps, so a batch's progress counts finished images.
 */
export class OpenAiImagesEngine implements Engine {
  readonly name = 'openai-images';
  readonly #options: OpenAiImagesEngineOptions;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #loaded = new Set<OpenAiImagesModel>();

  constructor(options: OpenAiImagesEngineOptions = {}) {
    this.#options = options;
    this.#clock = options.clock ?? workClock;
    this.#log = options.log ?? pino({ level: 'silent' });
  }

  async load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel> {
    const settings = parseSettings(OpenAiImagesSettings, manifest, this.name);
    const headers: Record<string, string> = {};
    if (settings.apiKeyEnv) {
      const key = (this.#options.env ?? process.env)[settings.apiKeyEnv];
      // Another host may have the variable set, so the job may go elsewhere.
      if (!key) throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" needs an API key in the environment variable ${settings.apiKeyEnv}, which is not set on this host`, true);
      headers.authorization = `Bearer ${key}`;
    }
    const endpoint = await resolveEndpoint(settings, this.#options.endpoints, { engine: this.name, manifest, device, modelPath });
    try {
      await this.#untilAnswered(endpoint, settings, headers, manifest.name);
      this.#log.info({ model: manifest.name, url: endpoint.url }, 'image server ready');
      const model = new OpenAiImagesModel({
        manifest, device, endpoint, settings, headers, clock: this.#clock, onUnloaded: () => this.#loaded.delete(model),
      });
      this.#loaded.add(model);
      return watchServer(model, endpoint);
    } catch (error) {
      await endpoint.release();
      throw error;
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.#loaded].map((model) => model.unload()));
  }

  /**
   * Wait until the server answers `GET /v1/models` (most servers have it; any answer but a refused
   * connection or a 503 shows it is up). A 401 or 403 fails the load now, with the server's words,
   * rather than every job later.
   */
  async #untilAnswered(endpoint: ServerEndpoint, settings: OpenAiImagesSettings, headers: Record<string, string>, model: string): Promise<void> {
    const giveUpAt = this.#clock.now() + settings.loadTimeoutMs;
    const backoff = new Backoff({ initialMs: 100, maxMs: 2000, factor: 2 });
    for (;;) {
      try {
        const url = `${endpoint.url}/v1/models`;
        const reply = await request({ method: 'GET', url, headers, signal: NEVER_ABORTED, timeoutMs: Math.min(settings.loadTimeoutMs, 30_000) });
        if (reply.status === 401 || reply.status === 403) throw errorForStatus(reply, { model, url: endpoint.url, what: 'GET /v1/models' });
        if (reply.status !== 503) return;
      } catch (error) {
        if (!(error instanceof EngineError && error.code === 'ENGINE_UNREACHABLE') || this.#clock.now() >= giveUpAt) throw error;
      }
      if (this.#clock.now() >= giveUpAt) throw new EngineError('ENGINE_UNREACHABLE', `${endpoint.url} was still not ready after ${settings.loadTimeoutMs} ms`, true);
      await sleep(this.#clock, Math.min(backoff.next(), Math.max(1, giveUpAt - this.#clock.now())), NEVER_ABORTED);
    }
  }
}

interface ModelDeps {
  manifest: ModelManifest;
  device: Device;
  endpoint: ServerEndpoint;
  settings: OpenAiImagesSettings;
  headers: Record<string, string>;
  clock: Clock;
  onUnloaded(): void;
}

const MAX_REMEMBERED_CANCELS = 10_000;

/** A model behind an OpenAI-style image server. */
class OpenAiImagesModel implements LoadedModel {
  readonly manifest: ModelManifest;
  readonly device: Device;
  /** The server's memory is not the agent's to measure; the manifest's planning figure stands. */
  readonly memoryMB: number;
  /** Per request failures only: the death of a server the agent started is reported by `watchServer`, which wraps this model. */
  readonly exited: Promise<string> = NEVER;
  readonly #deps: ModelDeps;
  readonly #defaults: RequestDefaults;
  readonly #batches = new Set<JobBatch>();
  readonly #cancelled = new Set<string>();
  #unloaded = false;

  constructor(deps: ModelDeps) {
    this.#deps = deps;
    this.manifest = deps.manifest;
    this.device = deps.device;
    this.memoryMB = deps.manifest.memoryMB;
    this.#defaults = {
      width: manifestParam(deps.manifest, 'defaultWidth') ?? 1024,
      height: manifestParam(deps.manifest, 'defaultHeight') ?? 1024,
      steps: manifestParam(deps.manifest, 'defaultSteps') ?? 20,
    };
  }

  async run(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<BatchResult> {
    if (this.#unloaded) throw new EngineError('ENGINE_FAILED', `model "${this.manifest.name}" is unloaded`, true);
    const batch = new JobBatch(jobs, {
      concurrency: this.#deps.settings.maxInFlight, clock: this.#deps.clock, budgetMs: this.#deps.settings.jobTimeoutMs,
      stepsOf: () => 1, onProgress,
    });
    const early = jobs.filter((job) => this.#cancelled.has(job.id)).map((job) => job.id);
    if (early.length) batch.stop('cancelled', early);
    this.#batches.add(batch);
    try {
      return { outputs: await batch.run((job, context) => this.#runJob(job, context)) };
    } finally {
      this.#batches.delete(batch);
      for (const job of jobs) this.#cancelled.delete(job.id);
    }
  }

  cancel(jobIds: readonly string[]): void {
    for (const jobId of jobIds) {
      this.#cancelled.add(jobId);
      if (this.#cancelled.size > MAX_REMEMBERED_CANCELS) this.#cancelled.delete(this.#cancelled.values().next().value!);
    }
    // The API has no cancel: closing the connection is the only signal a server can get.
    for (const batch of this.#batches) batch.stop('cancelled', jobIds);
  }

  async unload(): Promise<void> {
    if (this.#unloaded) return;
    this.#unloaded = true;
    for (const batch of this.#batches) batch.stop('unloaded');
    this.#deps.onUnloaded();
    await this.#deps.endpoint.release();
  }

  async #runJob(job: EngineJob, context: JobContext): Promise<OutputFile[]> {
    const { settings, endpoint, headers, clock } = this.#deps;
    const body = generationsBody(imageRequest(job.input, this.#defaults, this.manifest.name, openAiImagesDescriptor), settings);
    const ctx: RequestContext = { model: this.manifest.name, url: endpoint.url, what: `POST ${settings.path}` };
    const reply = await retryWhileBusy(
      () => request({ method: 'POST', url: `${endpoint.url}${settings.path}`, body, headers, signal: context.signal, timeoutMs: settings.requestTimeoutMs }),
      { clock, signal: context.signal, deadlineAt: context.deadlineAt, backoff: settings.busyBackoff, url: endpoint.url },
    );
    if (!isOk(reply)) throw errorForStatus(reply, ctx);
    const parsed = GenerationsReply.safeParse(reply.json);
    if (!parsed.success) throw badReply(ctx, `${reply.status} without a data array of images (${reply.text.slice(0, 120)})`);
    const image = parsed.data.data[0]!;
    try {
      if (image.b64_json) return [pngFromBase64(image.b64_json)];
      if (image.url) return [await this.#download(image.url, context)];
    } catch (error) {
      if (error instanceof EngineError) throw error;
      throw badReply(ctx, (error as Error).message);
    }
    throw badReply(ctx, 'an image with neither b64_json nor url');
  }

  /** A server that answers with a URL despite `response_format: "b64_json"`: fetch the image from it. */
  async #download(url: string, context: JobContext): Promise<OutputFile> {
    const { endpoint, headers, settings } = this.#deps;
    const target = new URL(url, `${endpoint.url}/`);
    // Send the key only back to the server it belongs to.
    const sameServer = target.origin === new URL(endpoint.url).origin;
    const reply = await request({
      method: 'GET', url: target.href, headers: { accept: 'image/png', ...(sameServer ? headers : {}) }, signal: context.signal, timeoutMs: settings.requestTimeoutMs,
    });
    if (!isOk(reply)) throw errorForStatus(reply, { model: this.manifest.name, url: target.origin, what: `GET ${target.pathname}` });
    return checkedPng(reply.bytes);
  }
}
