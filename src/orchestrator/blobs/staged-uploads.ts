import { createHash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync } from 'node:fs';
import { readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { MeshError } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import { newId } from '../store/ids.js';
import type { Commits, MeshStore, StagedUploadRecord } from '../store/index.js';
import type { BlobStore } from './blob-store.js';
import { DigestLocks } from './digest-locks.js';

export interface StagedUploadsDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  blobs: BlobStore;
  /** Where the bytes so far are kept: on the blob store's filesystem, so completing is a rename. */
  dir: string;
  /** The largest file one upload may make. */
  limitBytes: number;
  /**
   * The most uploads one grant lineage may have open at once (mesh.yaml `uploads.maxOpenPerGrant`): each holds up to
   * `limitBytes` of disk until it is completed, given up or swept a week later. Default: no cap (the orchestrator
   * always passes mesh.yaml's).
   */
  maxOpenPerGrant?: number;
  /**
   * A file in `dir` that no upload record names is swept once it has not changed for this long (default an hour): no
   * upload in progress has such a file, but the grace keeps a sweep from ever judging one mid-step.
   */
  orphanGraceMs?: number;
}

/** How long a client refused for its lineage's open uploads is told to wait (another of its uploads may end meanwhile). */
const TOO_MANY_RETRY_AFTER_S = 60;
const DEFAULT_ORPHAN_GRACE_MS = 3600 * 1000;
/** An upload's id, and so the name of its file in `dir`. */
const UPLOAD_ID = /^u_[0-9a-f]{1,64}$/;

/**
 * What holds an upload now, as the 409 a second comer gets says it. One holder at a time: a chunk, the completion, a
 * DELETE or a sweep takes the upload for its whole course, so none of them sees the file or the record change under it.
 */
const HELD_BY = {
  receiving: 'a chunk of it is being received',
  completing: 'it is being completed',
  deleting: 'it is being deleted',
  sweeping: 'it is being swept',
} as const;
type Holder = keyof typeof HELD_BY;

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
  /** Each upload's one holder, if any (HELD_BY): the state machine that keeps chunks, completion, DELETE and sweeps apart. */
  readonly #holders = new Map<string, Holder>();
  /** A lineage's uploads are counted and one created under its lock, so racing creates cannot pass its cap together. */
  readonly #lineages = new DigestLocks();
  /** The next periodic sweep (`sweepEvery`); null once closed. */
  #sweeper: Timer | null = null;

  constructor(deps: StagedUploadsDeps) {
    this.#deps = deps;
    mkdirSync(deps.dir, { recursive: true });
  }

  async create(grantId: string, total: number | null): Promise<UploadState> {
    if (total !== null && total > this.#deps.limitBytes) throw new MeshError('PAYLOAD_TOO_LARGE', { limit: this.#deps.limitBytes });
    return this.#lineages.holding([grantId], async () => {
      const limit = this.#deps.maxOpenPerGrant ?? Infinity;
      const open = Number.isFinite(limit) ? await this.#deps.store.stagedUploads.countStagedUploads(grantId) : 0;
      if (open >= limit) {
        throw new MeshError('TOO_MANY_UPLOADS', { open, retryAfter: TOO_MANY_RETRY_AFTER_S }, { headers: { 'retry-after': String(TOO_MANY_RETRY_AFTER_S) } });
      }
      const id = newId('u');
      this.#deps.commits.write(() => this.#deps.store.stagedUploads.insertStagedUpload({ id, grantId, total, createdAt: this.#deps.clock.now() }));
      await this.#deps.commits.durable();
      this.#hashes.set(id, { hash: createHash('sha256'), bytes: 0 });
      return { id, offset: 0, total };
    });
  }

  async state(id: string, grantId: string): Promise<UploadState> {
    const record = await this.#record(id, grantId);
    return { id, offset: await this.#size(id), total: record.total };
  }

  /**
   * Append `body` at `offset`; resolves with the new state. A wrong offset is 409 naming the one to resume from, and
   * so is a chunk that arrives while the upload is held (another chunk, its completion, a DELETE); going past the
   * announced total or the limit is 413, and what was appended of that chunk is kept (the client resumes at the
   * offset the state says).
   */
  async append(id: string, grantId: string, offset: number, body: Readable): Promise<UploadState> {
    await this.#record(id, grantId);
    return this.#holding(id, 'receiving', async () => {
      // Read again now that it is held: a DELETE or a completion that ended since took the record, and a chunk written
      // then would be a file no record names.
      const record = await this.#record(id, grantId);
      const size = await this.#size(id);
      if (offset !== size) throw conflict(id, size, `the chunk starts at ${offset}`);
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
    });
  }

  /**
   * Finish an upload: its bytes, hashed, go to `take` (which judges them and, if it accepts them, stores them) and the
   * upload is done; resolves with what `take` answered. A total announced and not reached is 409, and so is a
   * completion while the upload is held. Bytes `take` refuses (a 4xx: a picture that does not decode) are refused for
   * good, and the upload goes with them, so nothing of it is left; a failure of the store (5xx) leaves the upload to
   * complete again.
   */
  async complete<T>(id: string, grantId: string, take: (file: { path: string; digest: string; bytes: number }) => Promise<T>): Promise<T> {
    await this.#record(id, grantId);
    return this.#holding(id, 'completing', async () => {
      const record = await this.#record(id, grantId);
      const size = await this.#size(id);
      if (record.total !== null && size !== record.total) throw conflict(id, size, `it was announced as ${record.total} bytes`);
      // An empty file is a file too: an upload that never got a chunk has none on disk yet.
      if (size === 0) await writeFile(this.#path(id), '', { flag: 'a' });
      const progress = await this.#hashOf(id, size);
      const digest = `sha256:${progress.hash.copy().digest('hex')}`;
      let taken: T;
      try {
        taken = await take({ path: this.#path(id), digest, bytes: size });
      } catch (error) {
        if (error instanceof MeshError && error.status < 500) await this.#drop(id);
        throw error;
      }
      // The store took the file (moved it, or copied it to a bucket): whatever is left of it, and the record, go while
      // the upload is still held, so no chunk or DELETE arrives between them.
      await this.#drop(id);
      return taken;
    });
  }

  /** Give an upload up: its bytes are deleted. 409 while it is held (a chunk arriving, its completion). */
  async abort(id: string, grantId: string): Promise<void> {
    await this.#record(id, grantId);
    await this.#holding(id, 'deleting', async () => {
      await this.#record(id, grantId);
      await this.#drop(id);
    });
  }

  /** Delete uploads started more than `maxAgeMs` ago and never completed (one held now aside); returns how many. */
  async sweep(maxAgeMs: number): Promise<number> {
    const stale = await this.#deps.store.stagedUploads.stagedUploadsBefore(this.#deps.clock.now() - maxAgeMs);
    let swept = 0;
    for (const upload of stale) {
      if (this.#holders.has(upload.id)) continue;
      await this.#holding(upload.id, 'sweeping', async () => {
        // Completed or given up since the list was read: nothing of it is left to sweep.
        if (!(await this.#deps.store.stagedUploads.getStagedUpload(upload.id))) return;
        await this.#drop(upload.id);
        swept++;
      });
    }
    return swept;
  }

  /**
   * Delete the files in the staging folder that no upload record names and that have not changed for the grace period
   * (`orphanGraceMs`): what an older gpumesh left when a DELETE raced a chunk, or a crash between removing a record and
   * its file. The record sweep cannot find them, having no record to start from. Resolves with how many, and their bytes.
   */
  async sweepOrphans(): Promise<{ files: number; bytes: number }> {
    const before = this.#deps.clock.now() - (this.#deps.orphanGraceMs ?? DEFAULT_ORPHAN_GRACE_MS);
    const swept = { files: 0, bytes: 0 };
    for (const entry of await readdir(this.#deps.dir, { withFileTypes: true })) {
      if (!entry.isFile() || this.#holders.has(entry.name)) continue;
      await this.#holding(entry.name, 'sweeping', async () => {
        const path = join(this.#deps.dir, entry.name);
        const info = await stat(path).catch(() => null);
        if (!info || info.mtimeMs >= before) return;
        if (UPLOAD_ID.test(entry.name) && (await this.#deps.store.stagedUploads.getStagedUpload(entry.name))) return;
        this.#hashes.delete(entry.name);
        await rm(path, { force: true });
        swept.files++;
        swept.bytes += info.size;
      });
    }
    return swept;
  }

  /**
   * `sweep` and `sweepOrphans` every `everyMs` until `close`: an orchestrator that runs for weeks does not keep
   * abandoned uploads' bytes until its next start. `swept` hears each sweep's count (and the orphan files'), or why it
   * failed (the next one tries again).
   */
  sweepEvery(everyMs: number, maxAgeMs: number, swept: (count: number, error?: unknown, orphans?: { files: number; bytes: number }) => void): void {
    this.#sweeper = this.#deps.clock.setTimer(everyMs, () => {
      void (async () => {
        const count = await this.sweep(maxAgeMs);
        return { count, orphans: await this.sweepOrphans() };
      })().then(({ count, orphans }) => swept(count, undefined, orphans), (error: unknown) => swept(0, error)).finally(() => {
        if (this.#sweeper) this.sweepEvery(everyMs, maxAgeMs, swept);
      });
    });
  }

  close(): void {
    this.#sweeper?.cancel();
    this.#sweeper = null;
  }

  /**
   * Run `fn` as the upload's one holder, or refuse with 409 naming the holder there is. The check and the taking are
   * one synchronous step, so two requests can never both pass it.
   */
  async #holding<T>(id: string, holder: Holder, fn: () => Promise<T>): Promise<T> {
    const other = this.#holders.get(id);
    if (other) throw conflict(id, await this.#size(id), HELD_BY[other]);
    this.#holders.set(id, holder);
    try {
      return await fn();
    } finally {
      this.#holders.delete(id);
    }
  }

  /** An upload's bytes and record, gone (by its holder). The file first: a crash between leaves a record of 0 bytes, never a file no record names. */
  async #drop(id: string): Promise<void> {
    this.#hashes.delete(id);
    await rm(this.#path(id), { force: true });
    this.#deps.commits.write(() => this.#deps.store.stagedUploads.deleteStagedUpload(id));
    await this.#deps.commits.durable();
  }

  async #record(id: string, grantId: string): Promise<StagedUploadRecord> {
    const record = UPLOAD_ID.test(id) ? await this.#deps.store.stagedUploads.getStagedUpload(id) : null;
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

/** 409 UPLOAD_CONFLICT with the offset to resume from in the message, the envelope's `details` and `Upload-Offset`. */
function conflict(id: string, offset: number, detail: string): MeshError {
  return new MeshError('UPLOAD_CONFLICT', { id, offset, detail }, { details: { offset }, headers: { 'upload-offset': String(offset) } });
}
