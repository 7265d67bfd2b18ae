import { createHash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { MeshError } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import { newId } from '../store/ids.js';
import type { Commits, MeshStore, StagedUploadRecord } from '../store/index.js';
import type { BlobStore } from './blob-store.js';

export interface StagedUploadsDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  blobs: BlobStore;
  /** Where the bytes so far are kept: on the blob store's filesystem, so completing is a rename. */
  dir: string;
  /** The largest file one upload may make. */
  limitBytes: number;
}

/** Where an upload stands: the bytes received so far (the offset the next chunk must start at). */
export interface UploadState {
  id: string;
  offset: number;
  total: number | null;
}

/**
 * Uploads that survive a dropped connection (a model file of gigabytes over Wi-Fi): started with `create`, the bytes
 * sent in chunks, each at the offset the upload has reached (`append`; a chunk at another offset is refused with the
 * offset to resume from, as tus and GCS resumable uploads do), then `complete`, which takes the file into the
 * content-addressed store by its digest — deduplicated, since the same bytes are one blob. The bytes are hashed as
 * they arrive; after an orchestrator restart the file so far is hashed once and the upload goes on. Only the grant
 * lineage that started an upload may see or continue it.
 */
export class StagedUploads {
  readonly #deps: StagedUploadsDeps;
  /** The hash of each upload's bytes so far, and how many bytes it covers. */
  readonly #hashes = new Map<string, { hash: Hash; bytes: number }>();
  /** An upload receives one chunk at a time; a second, racing the first, is refused rather than interleaved. */
  readonly #busy = new Set<string>();
  /** The next periodic sweep (`sweepEvery`); null once closed. */
  #sweeper: Timer | null = null;

  constructor(deps: StagedUploadsDeps) {
    this.#deps = deps;
    mkdirSync(deps.dir, { recursive: true });
  }

  async create(grantId: string, total: number | null): Promise<UploadState> {
    if (total !== null && total > this.#deps.limitBytes) throw new MeshError('PAYLOAD_TOO_LARGE', { limit: this.#deps.limitBytes });
    const id = newId('u');
    this.#deps.commits.write(() => this.#deps.store.stagedUploads.insertStagedUpload({ id, grantId, total, createdAt: this.#deps.clock.now() }));
    await this.#deps.commits.durable();
    this.#hashes.set(id, { hash: createHash('sha256'), bytes: 0 });
    return { id, offset: 0, total };
  }

  async state(id: string, grantId: string): Promise<UploadState> {
    const record = await this.#record(id, grantId);
    return { id, offset: await this.#size(id), total: record.total };
  }

  /**
   * Append `body` at `offset`; resolves with the new state. A wrong offset is 409 naming the one to resume from;
   * going past the announced total or the limit is 413, and what was appended of that chunk is kept (the client
   * resumes at the offset the state says).
   */
  async append(id: string, grantId: string, offset: number, body: Readable): Promise<UploadState> {
    const record = await this.#record(id, grantId);
    if (this.#busy.has(id)) throw new MeshError('UPLOAD_CONFLICT', { id, offset: await this.#size(id), detail: 'another chunk of it is being received' });
    this.#busy.add(id);
    try {
      const size = await this.#size(id);
      if (offset !== size) throw new MeshError('UPLOAD_CONFLICT', { id, offset: size, detail: `the chunk starts at ${offset}` });
      const progress = await this.#hashOf(id, size);
      const limit = Math.min(this.#deps.limitBytes, record.total ?? Infinity);
      await pipeline(
        body,
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            if (progress.bytes + chunk.length > limit) {
              throw new MeshError('PAYLOAD_TOO_LARGE', { limit });
            }
            progress.hash.update(chunk);
            progress.bytes += chunk.length;
            yield chunk;
          }
        },
        createWriteStream(this.#path(id), { flags: 'a' }),
      ).catch(async (error: unknown) => {
        // A dropped connection leaves the bytes written so far, and the hash covers exactly those: the client resumes.
        this.#hashes.delete(id);
        throw error;
      });
      return { id, offset: progress.bytes, total: record.total };
    } finally {
      this.#busy.delete(id);
    }
  }

  /**
   * Finish an upload: its bytes, hashed, go to `take` (which judges them and, if it accepts them, stores them) and the
   * upload is done; resolves with what `take` answered. A total announced and not reached is 409. Bytes `take` refuses
   * (a 4xx: a picture that does not decode) are refused for good, and the upload goes with them, so nothing of it is
   * left; a failure of the store (5xx) leaves the upload to complete again.
   */
  async complete<T>(id: string, grantId: string, take: (file: { path: string; digest: string; bytes: number }) => Promise<T>): Promise<T> {
    const record = await this.#record(id, grantId);
    if (this.#busy.has(id)) throw new MeshError('UPLOAD_CONFLICT', { id, offset: await this.#size(id), detail: 'a chunk of it is still being received' });
    // No chunk may be appended to the bytes being judged and stored.
    this.#busy.add(id);
    let taken: T;
    try {
      const size = await this.#size(id);
      if (record.total !== null && size !== record.total) throw new MeshError('UPLOAD_CONFLICT', { id, offset: size, detail: `it was announced as ${record.total} bytes` });
      const progress = await this.#hashOf(id, size);
      const digest = `sha256:${progress.hash.copy().digest('hex')}`;
      try {
        taken = await take({ path: this.#path(id), digest, bytes: size });
      } catch (error) {
        if (error instanceof MeshError && error.status < 500) await this.#drop(id);
        throw error;
      }
      this.#hashes.delete(id);
    } finally {
      this.#busy.delete(id);
    }
    this.#deps.commits.write(() => this.#deps.store.stagedUploads.deleteStagedUpload(id));
    await this.#deps.commits.durable();
    return taken;
  }

  /** Give an upload up: its bytes are deleted. */
  async abort(id: string, grantId: string): Promise<void> {
    await this.#record(id, grantId);
    if (this.#busy.has(id)) throw new MeshError('UPLOAD_CONFLICT', { id, offset: await this.#size(id), detail: 'a chunk of it is being received, or it is being completed' });
    await this.#drop(id);
  }

  /** Delete uploads started more than `maxAgeMs` ago and never completed (one receiving a chunk now aside); returns how many. */
  async sweep(maxAgeMs: number): Promise<number> {
    const stale = await this.#deps.store.stagedUploads.stagedUploadsBefore(this.#deps.clock.now() - maxAgeMs);
    let swept = 0;
    for (const upload of stale) {
      if (this.#busy.has(upload.id)) continue;
      await this.#drop(upload.id);
      swept++;
    }
    return swept;
  }

  /**
   * `sweep` every `everyMs` until `close`: an orchestrator that runs for weeks does not keep abandoned uploads' bytes
   * until its next start. `swept` hears each sweep's count, or why it failed (the next one tries again).
   */
  sweepEvery(everyMs: number, maxAgeMs: number, swept: (count: number, error?: unknown) => void): void {
    this.#sweeper = this.#deps.clock.setTimer(everyMs, () => {
      void this.sweep(maxAgeMs).then((count) => swept(count), (error: unknown) => swept(0, error)).finally(() => {
        if (this.#sweeper) this.sweepEvery(everyMs, maxAgeMs, swept);
      });
    });
  }

  close(): void {
    this.#sweeper?.cancel();
    this.#sweeper = null;
  }

  /** An upload's bytes and record, gone. */
  async #drop(id: string): Promise<void> {
    this.#hashes.delete(id);
    await rm(this.#path(id), { force: true });
    this.#deps.commits.write(() => this.#deps.store.stagedUploads.deleteStagedUpload(id));
    await this.#deps.commits.durable();
  }

  async #record(id: string, grantId: string): Promise<StagedUploadRecord> {
    const record = /^u_[0-9a-f]{1,64}$/.test(id) ? await this.#deps.store.stagedUploads.getStagedUpload(id) : null;
    // Another lineage's upload is not found: it does not learn the upload exists.
    if (!record || record.grantId !== grantId) throw new MeshError('NOT_FOUND', { what: `Upload ${id.slice(0, 80)}` });
    return record;
  }

  #path(id: string): string {
    return join(this.#deps.dir, id);
  }

  async #size(id: string): Promise<number> {
    try {
      return (await stat(this.#path(id))).size;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw error;
    }
  }

  /** The hash of the first `size` bytes: kept in memory as they arrived, or read from the file after a restart or a drop. */
  async #hashOf(id: string, size: number): Promise<{ hash: Hash; bytes: number }> {
    const kept = this.#hashes.get(id);
    if (kept && kept.bytes === size) return kept;
    const hash = createHash('sha256');
    if (size > 0) for await (const chunk of createReadStream(this.#path(id), { end: size - 1 })) hash.update(chunk as Buffer);
    const progress = { hash, bytes: size };
    this.#hashes.set(id, progress);
    return progress;
  }
}
