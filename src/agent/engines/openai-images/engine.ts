import type { Device, ModelManifest } from '../../../protocol/index.js';
import { EngineError, type EngineJob, type LoadedModel, type OutputFile, type Progress } from '../../core/engine.js';
import { JobBatch, type JobContext } from '../kit/job-batch.js';
import { ServerHttp, untilDeadline, type HttpReply } from '../kit/http.js';
import { ServerError } from '../kit/server-error.js';
import { imageRequest, manifestParam, type RequestDefaults } from '../kit/image-input.js';
import { checkedPng, pngFromBase64 } from '../kit/png.js';
import { ServerEngine, ServerModel, type ServerEngineOptions, type ServerModelOptions } from '../kit/server.js';
import { parseSettings } from '../kit/settings.js';
import type { Clock } from '../../../protocol/clock.js';
import { openAiImagesDescriptor, OpenAiImagesSettings } from '../../../protocol/engines/openai-images.js';
import { GenerationsReply, generationsBody } from './wire.js';

export interface OpenAiImagesEngineOptions extends ServerEngineOptions {
  /** Where `settings.apiKeyEnv` is looked up. Default: process.env. */
  env?: NodeJS.ProcessEnv;
}

/**
 * Any server with OpenAI's image API as a gpumesh engine: one synchronous
 * `POST /v1/images/generations` per job (`n: 1`, `size: "WxH"`, base64 answer). The API reports
 * no steps, so a batch's progress counts finished images.
 */
export class OpenAiImagesEngine extends ServerEngine {
  readonly name = 'openai-images';
  readonly #env: NodeJS.ProcessEnv;

  constructor(options: OpenAiImagesEngineOptions = {}) {
    super(options);
    this.#env = options.env ?? process.env;
  }

  async load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel> {
    const settings = parseSettings(OpenAiImagesSettings, manifest, this.name);
    const headers: Record<string, string> = {};
    if (settings.apiKeyEnv) {
      const key = this.#env[settings.apiKeyEnv];
      // Another host may have the variable set, so the job may go elsewhere.
      if (!key) throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" needs an API key in the environment variable ${settings.apiKeyEnv}, which is not set on this host`, true);
      headers.authorization = `Bearer ${key}`;
    }
    return this.serve(settings, { manifest, device, modelPath }, async (endpoint) => {
      const http = new ServerHttp({ server: endpoint, model: manifest.name, timeoutMs: settings.requestTimeoutMs, clock: this.clock });
      await this.#untilAnswered(http, settings, headers);
      this.log.info({ model: manifest.name, url: endpoint.url }, 'image server ready');
      // The server's memory is not the agent's to measure; the manifest's planning figure stands.
      return new OpenAiImagesModel({ manifest, device, memoryMB: manifest.memoryMB, endpoint, settings, http, headers, clock: this.clock });
    });
  }

  /**
   * Wait until the server answers `GET /v1/models` (most servers have it; any answer but a refused
   * connection or a 503 shows it is up). A 401 or 403 fails the load now, with the server's words,
   * rather than every job later.
   */
  async #untilAnswered(http: ServerHttp, settings: OpenAiImagesSettings, headers: Record<string, string>): Promise<void> {
    let answer: HttpReply | ServerError;
    try {
      answer = await http.untilAnswered('/v1/models', settings.loadTimeoutMs, headers);
    } catch (error) {
      if (error instanceof ServerError && error.status === 503) throw new EngineError('ENGINE_UNREACHABLE', `${http.url} was still not ready after ${settings.loadTimeoutMs} ms`, true);
      throw error;
    }
    if (answer instanceof ServerError && (answer.status === 401 || answer.status === 403)) throw answer;
  }
}

interface ModelOptions extends ServerModelOptions {
  settings: OpenAiImagesSettings;
  http: ServerHttp;
  /** The API key's header, sent only to the server itself. */
  headers: Record<string, string>;
  clock: Clock;
}

/** A model behind an OpenAI-style image server. The API has no cancel: closing the connection is the only signal a server can get. */
class OpenAiImagesModel extends ServerModel {
  readonly #options: ModelOptions;
  readonly #defaults: RequestDefaults;

  constructor(options: ModelOptions) {
    super(options);
    this.#options = options;
    this.#defaults = {
      width: manifestParam(options.manifest, 'defaultWidth') ?? 1024,
      height: manifestParam(options.manifest, 'defaultHeight') ?? 1024,
      steps: manifestParam(options.manifest, 'defaultSteps') ?? 20,
    };
  }

  protected batch(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): JobBatch {
    const { settings, http, clock } = this.#options;
    return new JobBatch(jobs, {
      concurrency: settings.maxInFlight, clock, budgetMs: settings.jobTimeoutMs,
      stepsOf: () => 1, onProgress, runOne: (job, context) => this.#runJob(job, context, http),
    });
  }

  async #runJob(job: EngineJob, context: JobContext, http: ServerHttp): Promise<OutputFile[]> {
    const { settings, headers } = this.#options;
    const body = generationsBody(imageRequest(job.input, this.#defaults, this.manifest.name, openAiImagesDescriptor), settings);
    const what = `POST ${settings.path}`;
    const reply = await http.request('POST', settings.path, { json: body, headers, signal: context.signal, retry: untilDeadline(settings.busyBackoff, context.deadlineAt) });
    const parsed = GenerationsReply.safeParse(reply.json);
    if (!parsed.success) throw http.unexpected(what, `${reply.status} without a data array of images (${reply.text.slice(0, 120)})`);
    const image = parsed.data.data[0]!;
    try {
      if (image.b64_json) return [pngFromBase64(image.b64_json)];
      if (image.url) return [await this.#download(image.url, context, http)];
    } catch (error) {
      if (error instanceof EngineError) throw error;
      throw http.unexpected(what, (error as Error).message);
    }
    throw http.unexpected(what, 'an image with neither b64_json nor url');
  }

  /** A server that answers with a URL despite `response_format: "b64_json"`: fetch the image from it. */
  async #download(url: string, context: JobContext, http: ServerHttp): Promise<OutputFile> {
    const target = new URL(url, `${http.url}/`);
    // Send the key only back to the server it belongs to.
    const sameServer = target.origin === new URL(http.url).origin;
    const headers = { accept: 'image/png', ...(sameServer ? this.#options.headers : {}) };
    const reply = await http.request('GET', target.href, { headers, signal: context.signal });
    return checkedPng(reply.bytes);
  }
}
