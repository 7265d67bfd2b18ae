import { createHash } from 'node:crypto';
import sharp from 'sharp';
import { LIMITS, picturesIn } from '../../protocol/index.js';
import { EngineError, type InputPicture } from '../core/engine.js';
import type { FetchBlob } from '../models/model-cache.js';

export interface InputPicturesOptions {
  /** The most bytes one picture may have; the orchestrator refuses larger uploads long before (default 256 MiB). */
  maxBytes?: number;
  maxPixels?: number;
  /** A picture that has not arrived in this long will not: the batch fails over (default 60 s). */
  fetchTimeoutMs?: number;
}

/**
 * The pictures a batch's jobs name, fetched from the orchestrator by digest, checked against it, and decoded with
 * sharp under the same pixel limit the orchestrator applied: the agent trusts the bytes no more than the
 * orchestrator trusted the client. Pictures live in memory for the batch only; nothing is kept on disk.
 */
export class InputPictures {
  readonly #fetch: FetchBlob;
  readonly #options: Required<InputPicturesOptions>;

  constructor(fetchBlob: FetchBlob, options: InputPicturesOptions = {}) {
    this.#fetch = fetchBlob;
    this.#options = { maxBytes: 256 * 1024 * 1024, maxPixels: LIMITS.inputImage.maxPixels, fetchTimeoutMs: 60_000, ...options };
  }

  /** Each job's decoded pictures by field (a job naming none gets none); null, at once, when no job names one. */
  forJobs(jobs: readonly { id: string; input: Record<string, unknown> }[]): Promise<Map<string, Record<string, InputPicture>>> | null {
    if (!jobs.some((job) => picturesIn(job.input).length > 0)) return null;
    return this.#forJobs(jobs);
  }

  async #forJobs(jobs: readonly { id: string; input: Record<string, unknown> }[]): Promise<Map<string, Record<string, InputPicture>>> {
    const signal = AbortSignal.timeout(this.#options.fetchTimeoutMs);
    const bytesOf = new Map<string, Promise<Buffer>>();
    // Every picture of the batch is fetched and decoded at once, not job after job: sharp decodes on the thread pool,
    // and the engine waits for the last picture of the batch, not the first.
    const decoded = jobs.map(async (job): Promise<[string, Record<string, InputPicture>]> => {
      const size = typeof job.input.width === 'number' && typeof job.input.height === 'number' ? { width: job.input.width, height: job.input.height } : null;
      const pictures = await Promise.all(picturesIn(job.input).map(async ({ field, digest }) => {
        if (!bytesOf.has(digest)) bytesOf.set(digest, this.#fetchVerified(digest, signal));
        // A workflow's picture goes to its ComfyUI as it came, alpha and all (a LoadImage's mask is its alpha).
        const channels = field === 'mask' ? 1 : field.startsWith('pictures.') ? 4 : 3;
        return [field, await this.#decode(await bytesOf.get(digest)!, channels, channels === 4 ? null : size, `${field} ${digest}`)] as const;
      }));
      return [job.id, Object.fromEntries(pictures)];
    });
    return new Map((await Promise.all(decoded)).filter(([, pictures]) => Object.keys(pictures).length > 0));
  }

  async #fetchVerified(digest: string, signal: AbortSignal): Promise<Buffer> {
    let body: Buffer;
    try {
      const response = await this.#fetch(digest, signal);
      // Both caught below and reported as ENGINE_FAILED (retryable), naming the picture.
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const declared = Number(response.headers.get('content-length') ?? 0);
      if (declared > this.#options.maxBytes) throw new Error(`${declared} bytes is more than the ${this.#options.maxBytes} a picture may have`);
      body = Buffer.from(await response.arrayBuffer());
    } catch (error) {
      throw new EngineError('ENGINE_FAILED', `fetching the input picture ${digest} failed: ${error instanceof Error ? error.message : String(error)}`, true, { cause: error });
    }
    const actual = `sha256:${createHash('sha256').update(body).digest('hex')}`;
    if (actual !== digest) throw new EngineError('ENGINE_FAILED', `the input picture ${digest} arrived as ${actual}`, true);
    return body;
  }

  async #decode(bytes: Buffer, channels: 1 | 3 | 4, size: { width: number; height: number } | null, what: string): Promise<InputPicture> {
    try {
      let image = sharp(bytes, { limitInputPixels: this.#options.maxPixels, failOn: 'truncated' });
      if (size) image = image.resize(size.width, size.height, { fit: 'cover' });
      // A mask is its alpha (OpenAI's convention: transparent = repaint); a picture is flattened onto white.
      image = channels === 1 ? image.ensureAlpha().extractChannel('alpha')
        : channels === 4 ? image.toColourspace('srgb').ensureAlpha()
          : image.flatten({ background: '#ffffff' }).toColourspace('srgb').removeAlpha();
      const { data, info } = await image.raw().toBuffer({ resolveWithObject: true });
      return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width: info.width, height: info.height, channels };
    } catch (error) {
      throw new EngineError('IMAGE_REFUSED', `${what}: ${error instanceof Error ? error.message : String(error)}`, false, { cause: error });
    }
  }
}
