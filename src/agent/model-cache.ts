import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync } from 'node:fs';
import { rename, rm, access } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { EngineError } from './engines/engine.js';

export type FetchBlob = (digest: string) => Promise<Response>;

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

  constructor(dir: string, fetchBlob: FetchBlob) {
    this.#dir = dir;
    this.#fetch = fetchBlob;
    mkdirSync(join(dir, 'tmp'), { recursive: true });
  }

  pathOf(digest: string): string {
    return join(this.#dir, digest.replace(':', '-'));
  }

  /** Digests on disk (reported in hello). */
  get cached(): string[] {
    return [...this.#verified];
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
    const response = await this.#fetch(digest);
    if (!response.ok || !response.body) {
      throw new EngineError('ENGINE_FAILED', `pulling model ${digest} failed: HTTP ${response.status}`);
    }
    const temp = join(this.#dir, 'tmp', randomBytes(8).toString('hex'));
    const hash = createHash('sha256');
    try {
      await pipeline(
        Readable.fromWeb(response.body as import('node:stream/web').ReadableStream),
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            hash.update(chunk);
            yield chunk;
          }
        },
        createWriteStream(temp),
      );
      const actual = `sha256:${hash.digest('hex')}`;
      if (actual !== digest) throw new EngineError('INTEGRITY_FAILED', `model blob ${digest} hashed to ${actual}; discarded`);
      await rename(temp, target);
    } finally {
      await rm(temp, { force: true });
    }
    this.#verified.add(digest);
    return target;
  }
}
