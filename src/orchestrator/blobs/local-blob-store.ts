import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { access, open as openFile, readdir, readFile, rename, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { assertDigest, MeshError, sha256Digest } from '../../protocol/index.js';
import type { BlobHandle, BlobStore, StoredBytes } from './blob-store.js';
import { spoolHashed } from './spool.js';
import { statSignature } from './verified-marks.js';

/**
 * Content-addressed bytes on disk: `<root>/sha256/<2 hex>/<64 hex>`. Writes go
 * to a temporary file, are hashed as they stream, and are renamed into place
 * only when the digest matches, so a reader never sees a partial blob. Reads
 * go through `BlobReader`, which checks the bytes still match on the way out
 * and moves a file that does not to `<root>/quarantine/`.
 */
export class LocalBlobStore implements BlobStore {
  readonly #root: string;
  readonly #tmp: string;
  readonly #quarantine: string;

  constructor(root: string) {
    this.#root = root;
    this.#tmp = join(root, 'tmp');
    this.#quarantine = join(root, 'quarantine');
    mkdirSync(this.#tmp, { recursive: true });
  }

  get location(): string {
    return this.#root;
  }

  /** The file of a blob. This store's own: nothing outside it needs a path (reads go through `open` and `read`). */
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

  async putBytes(bytes: Uint8Array, expected?: string): Promise<StoredBytes> {
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

  async putStream(source: Readable, options: { expected?: string; limit?: number } = {}): Promise<StoredBytes> {
    const temp = this.#tempPath();
    try {
      const stored = await spoolHashed(source, temp, options);
      await this.#commit(temp, stored.digest);
      return stored;
    } finally {
      await rm(temp, { force: true });
    }
  }

  /**
   * Take the file by renaming it — no copy. The file must be on the store's filesystem (staged uploads are kept
   * under the blob folder for that).
   */
  async adopt(path: string, digest: string): Promise<void> {
    if (await this.has(digest)) {
      await rm(path, { force: true });
      return;
    }
    await this.#commit(path, digest);
  }

  async open(digest: string): Promise<BlobHandle | null> {
    const path = this.pathOf(digest);
    let handle: FileHandle;
    try {
      handle = await openFile(path, 'r');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
    try {
      // fstat of the open file, so the size checked and the signature marked are those of the bytes read.
      const stats = await handle.stat({ bigint: true });
      return new LocalBlobHandle(digest, handle, Number(stats.size), stats.ino, statSignature(stats), (inode, now) => this.#quarantineFile(digest, inode, now));
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  async read(digest: string, range?: { start: number; end: number }): Promise<Buffer | null> {
    try {
      if (!range) return await readFile(this.pathOf(digest));
      const file = await openFile(this.pathOf(digest), 'r');
      try {
        const buffer = Buffer.alloc(Math.max(0, range.end - range.start));
        const { bytesRead } = await file.read(buffer, 0, buffer.length, range.start);
        return buffer.subarray(0, bytesRead);
      } finally {
        await file.close();
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
  }

  async localFile(digest: string): Promise<string | null> {
    return (await this.has(digest)) ? this.pathOf(digest) : null;
  }

  async remove(digest: string): Promise<void> {
    await rm(this.pathOf(digest), { force: true });
  }

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

  /**
   * Move a corrupt blob to `<root>/quarantine/sha256-<hex>.<ISO time>`, only if its path still holds `inode`, the
   * file the caller found corrupt (a fresh upload of the same digest is never moved).
   */
  async #quarantineFile(digest: string, inode: bigint, now: number): Promise<string | null> {
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

/** An open blob file: read with positional reads, so one descriptor serves the hash and the body. */
class LocalBlobHandle implements BlobHandle {
  #closed = false;

  constructor(
    readonly digest: string,
    private readonly file: FileHandle,
    readonly size: number,
    private readonly inode: bigint,
    readonly signature: string,
    private readonly move: (inode: bigint, now: number) => Promise<string | null>,
  ) {}

  /** A file that shrank meanwhile is an error. */
  async *chunks(start: number, end: number, chunkBytes: number): AsyncGenerator<Buffer> {
    let position = start;
    while (position < end) {
      const length = Math.min(chunkBytes, end - position);
      // A fresh buffer per chunk: the socket may still hold the previous one.
      const buffer = Buffer.allocUnsafe(length);
      const { bytesRead } = await this.file.read(buffer, 0, length, position);
      if (bytesRead === 0) {
        throw new MeshError('INTEGRITY_FAILED', { digest: this.digest, detail: `its file shrank to ${position} bytes while it was read` });
      }
      position += bytesRead;
      yield bytesRead === length ? buffer : buffer.subarray(0, bytesRead);
    }
  }

  quarantine(now: number): Promise<string | null> {
    return this.move(this.inode, now);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.file.close();
  }
}
