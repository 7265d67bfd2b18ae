import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { access, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { MeshError } from '../../protocol/index.js';
import { assertDigest, sha256Digest } from '../../protocol/index.js';

/**
 * Content-addressed bytes on disk: `<root>/sha256/<2 hex>/<64 hex>`. Writes go
 * to a temporary file, are hashed as they stream, and are renamed into place
 * only when the digest matches, so a reader never sees a partial blob. Reads
 * go through `BlobReader`, which checks the bytes still match on the way out
 * and moves a file that does not to `<root>/quarantine/`.
 */
export class BlobStore {
  readonly #root: string;
  readonly #tmp: string;
  readonly #quarantine: string;

  constructor(root: string) {
    this.#root = root;
    this.#tmp = join(root, 'tmp');
    this.#quarantine = join(root, 'quarantine');
    mkdirSync(this.#tmp, { recursive: true });
  }

  pathOf(digest: string): string {
    const hex = assertDigest(digest).slice('sha256:'.length);
    return join(this.#root, 'sha256', hex.slice(0, 2), hex);
  }

  async has(digest: string): Promise<boolean> {
    try {
      await access(this.pathOf(digest));
      return true;
    } catch {
      return false;
    }
  }

  /** Store bytes already in memory; returns their digest. */
  async putBytes(bytes: Uint8Array, expected?: string): Promise<{ digest: string; bytes: number }> {
    const digest = sha256Digest(bytes);
    if (expected !== undefined && expected !== digest) throw new MeshError('DIGEST_MISMATCH', { expected, actual: digest });
    if (!(await this.has(digest))) {
      const temp = this.#tempPath();
      await writeFile(temp, bytes);
      await this.#commit(temp, digest);
    }
    return { digest, bytes: bytes.length };
  }

  /**
   * Store small bytes already in memory (an output that came inline in a report, 256 KiB at most by default) without
   * leaving the event loop: a write that small costs less than the thread-pool round trips of the async calls.
   */
  putSmallSync(bytes: Uint8Array, expected: string): void {
    const digest = sha256Digest(bytes);
    if (expected !== digest) throw new MeshError('DIGEST_MISMATCH', { expected, actual: digest });
    const target = this.pathOf(digest);
    if (existsSync(target)) return;
    const temp = this.#tempPath();
    writeFileSync(temp, bytes);
    mkdirSync(join(target, '..'), { recursive: true });
    renameSync(temp, target);
  }

  /**
   * Store a stream, hashing as it is written. With `expected`, a mismatch
   * discards the bytes and throws DIGEST_MISMATCH. `limit` caps the size.
   */
  async putStream(source: Readable, options: { expected?: string; limit?: number } = {}): Promise<{ digest: string; bytes: number }> {
    const temp = this.#tempPath();
    const hash = createHash('sha256');
    let bytes = 0;
    const limit = options.limit ?? Infinity;
    try {
      await pipeline(
        source,
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            bytes += chunk.length;
            if (bytes > limit) throw new MeshError('PAYLOAD_TOO_LARGE', { limit });
            hash.update(chunk);
            yield chunk;
          }
        },
        createWriteStream(temp),
      );
      const digest = `sha256:${hash.digest('hex')}`;
      if (options.expected !== undefined && options.expected !== digest) {
        throw new MeshError('DIGEST_MISMATCH', { expected: options.expected, actual: digest });
      }
      await this.#commit(temp, digest);
      return { digest, bytes };
    } finally {
      await rm(temp, { force: true });
    }
  }

  /**
   * Take a file whose bytes are already known to hash to `digest` (a staged upload, hashed as it arrived) into the
   * store by renaming it — no copy. The file must be on the store's filesystem. An existing blob of the digest wins
   * (it has the same bytes) and the file is removed.
   */
  async adopt(path: string, digest: string): Promise<void> {
    if (await this.has(digest)) {
      await rm(path, { force: true });
      return;
    }
    await this.#commit(path, digest);
  }

  /**
   * Move a corrupt blob out of the content-addressed tree, to
   * `<root>/quarantine/sha256-<hex>.<ISO time>`, where an operator can inspect it
   * and where it is never served. `inode` is the file the caller found corrupt:
   * if the path now holds another file (a fresh upload of the same digest
   * replaced it) or none (another reader moved it first), nothing is moved and
   * the answer is null; otherwise the new path.
   */
  async quarantine(digest: string, inode: bigint, now: number): Promise<string | null> {
    const path = this.pathOf(digest);
    try {
      if ((await stat(path, { bigint: true })).ino !== inode) return null;
      mkdirSync(this.#quarantine, { recursive: true });
      const target = join(this.#quarantine, `${this.#quarantinePrefix(digest)}${new Date(now).toISOString().replaceAll(':', '-')}`);
      await rename(path, target);
      return target;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
  }

  /** The newest quarantined copy of `digest`, or null: tells "was corrupt" from "never existed". */
  async quarantined(digest: string): Promise<string | null> {
    const prefix = this.#quarantinePrefix(digest);
    let names: string[];
    try {
      names = await readdir(this.#quarantine);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
    const newest = names.filter((name) => name.startsWith(prefix)).sort().at(-1);
    return newest === undefined ? null : join(this.#quarantine, newest);
  }

  #quarantinePrefix(digest: string): string {
    return `${assertDigest(digest).replace(':', '-')}.`;
  }

  #tempPath(): string {
    return join(this.#tmp, `${process.pid}-${randomBytes(8).toString('hex')}`);
  }

  async #commit(temp: string, digest: string): Promise<void> {
    const target = this.pathOf(digest);
    mkdirSync(join(target, '..'), { recursive: true });
    await rename(temp, target);
  }
}
