import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync } from 'node:fs';
import { rename, rm, access } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { EngineError } from './engines/engine.js';

export type FetchBlob = (digest: string, signal: AbortSignal) => Promise<Response>;

/** By default, a pull that receives nothing for this long is given up (and the batch that needed it fails over). */
const IDLE_TIMEOUT_MS = 15_000;

async function hashFile(path: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return `sha256:${hash.digest('hex')}`;
}

/**
 * Model files on this host, by digest. A pull streams the blob from the
 * orchestrator, hashing it on the way, and keeps it only if the hash matches;
 * a file already on disk is re-hashed once per process before first use.
 */
export class ModelCache {
  readonly #dir: string;
  readonly #fetch: FetchBlob;
  readonly #verified = new Set<string>();
  readonly #pulls = new Map<string, Promise<string>>();
  readonly #aborts = new Set<AbortController>();

  readonly #idleTimeoutMs: number;

  constructor(dir: string, fetchBlob: FetchBlob, options: { idleTimeoutMs?: number } = {}) {
    this.#dir = dir;
    this.#fetch = fetchBlob;
    this.#idleTimeoutMs = options.idleTimeoutMs ?? IDLE_TIMEOUT_MS;
    mkdirSync(join(dir, 'tmp'), { recursive: true });
  }

  pathOf(digest: string): string {
    return join(this.#dir, digest.replace(':', '-'));
  }

  /** Digests on disk (reported in hello). */
  get cached(): string[] {
    return [...this.#verified];
  }

  /** Give up every pull in progress (the orchestrator they come from went away). */
  abortPulls(reason: string): void {
    for (const controller of this.#aborts) controller.abort(new Error(reason));
  }

  /** The local path of a model file, pulled and verified if needed. */
  async path(digest: string): Promise<string> {
    if (this.#verified.has(digest)) return this.pathOf(digest);
    let pull = this.#pulls.get(digest);
    if (!pull) {
      pull = this.#ensure(digest).finally(() => this.#pulls.delete(digest));
      this.#pulls.set(digest, pull);
    }
    return pull;
  }

  async #ensure(digest: string): Promise<string> {
    const target = this.pathOf(digest);
    const onDisk = await access(target).then(() => true, () => false);
    if (onDisk && (await hashFile(target)) === digest) {
      this.#verified.add(digest);
      return target;
    }
    const controller = new AbortController();
    this.#aborts.add(controller);
    const idle = setTimeout(() => controller.abort(new Error(`no data for ${this.#idleTimeoutMs} ms`)), this.#idleTimeoutMs);
    const temp = join(this.#dir, 'tmp', randomBytes(8).toString('hex'));
    const hash = createHash('sha256');
    try {
      const response = await this.#fetch(digest, controller.signal);
      if (!response.ok || !response.body) {
        throw new EngineError('ENGINE_FAILED', `pulling model ${digest} failed: HTTP ${response.status}`);
      }
      await pipeline(
        Readable.fromWeb(response.body as import('node:stream/web').ReadableStream),
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            idle.refresh();
            hash.update(chunk);
            yield chunk;
          }
        },
        createWriteStream(temp),
        { signal: controller.signal },
      );
      const actual = `sha256:${hash.digest('hex')}`;
      if (actual !== digest) throw new EngineError('INTEGRITY_FAILED', `model blob ${digest} hashed to ${actual}; discarded`);
      await rename(temp, target);
    } catch (error) {
      if (error instanceof EngineError) throw error;
      const reason = controller.signal.aborted ? String((controller.signal.reason as Error)?.message ?? controller.signal.reason) : (error as Error).message;
      throw new EngineError('ENGINE_FAILED', `pulling model ${digest} failed: ${reason}`, true, { cause: error });
    } finally {
      clearTimeout(idle);
      this.#aborts.delete(controller);
      await rm(temp, { force: true });
    }
    this.#verified.add(digest);
    return target;
  }
}
