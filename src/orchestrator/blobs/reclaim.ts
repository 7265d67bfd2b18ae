import { setTimeout as pause } from 'node:timers/promises';
import type { Commits, MeshStore } from '../store/index.js';
import type { BlobStore } from './blob-store.js';
import type { DigestLocks } from './digest-locks.js';
import type { InputImages } from './input-images.js';

export interface BlobReclaimerDeps {
  store: MeshStore;
  commits: Commits;
  blobs: BlobStore;
  locks: DigestLocks;
  /** A picture's decoding verdict goes with its bytes (admission takes a verdict as the picture being there). */
  pictures: Pick<InputImages, 'forget'>;
  /** Whether a model the registry knows (built in, declared in mesh.yaml, or added) has the blob as a file. */
  modelFile(digest: string): boolean;
}

/** What giving bytes back freed: the digests whose bytes left the store, and how many bytes that was. */
export interface Reclaimed {
  freed: string[];
  freedBytes: number;
}

/**
 * Gives the bytes of blobs back once nothing names them: no published result, no output uploaded for a job, no file a
 * client stored, no job's input, no model's file. The same bytes are one blob however many name them — results of two
 * jobs with the same seed, a result a client also uploaded as a picture to start from — so bytes go with the last
 * name, not the first. Each digest is decided and removed under its lock (DigestLocks), which every writer that
 * stores or records a digest also takes: nothing can come to name it between the check and the removal. The record
 * goes first (with a picture's decoding verdict), then the bytes, so a crash in between leaves bytes nothing serves
 * rather than a record without them.
 *
 * Admission does not take the locks (it is synchronous); a job naming a picture in the very turns its last other name
 * goes may be admitted and then fail on its host, the picture gone (BLOB not found), which is what deleting it meant.
 */
export class BlobReclaimer {
  readonly #deps: BlobReclaimerDeps;

  constructor(deps: BlobReclaimerDeps) {
    this.#deps = deps;
  }

  /** Give back the bytes of those of `digests` that nothing names any more. */
  async release(digests: Iterable<string>): Promise<Reclaimed> {
    const reclaimed: Reclaimed = { freed: [], freedBytes: 0 };
    for (const digest of new Set(digests)) {
      const bytes = await this.#deps.locks.holding([digest], () => this.#releaseOne(digest));
      if (bytes !== null) {
        reclaimed.freed.push(digest);
        reclaimed.freedBytes += bytes;
      }
    }
    return reclaimed;
  }

  /**
   * Give back every stored blob that nothing names at all, a page of records at a time with a pause after each as long
   * as it took: what no deletion hands over — small outputs of results deleted before deleting gave bytes back (they
   * have no row left to find them by), an inline output of an attempt that failed after it was kept. Each candidate
   * is decided under its lock, as `release` decides.
   */
  async sweepUnnamed(page = 1000): Promise<Reclaimed> {
    const swept: Reclaimed = { freed: [], freedBytes: 0 };
    let after: string | null = null;
    do {
      const started = performance.now();
      const { unnamed, last }: { unnamed: string[]; last: string | null } = await this.#deps.store.blobs.unnamedBlobs(after, page);
      const reclaimed = await this.release(unnamed);
      swept.freed.push(...reclaimed.freed);
      swept.freedBytes += reclaimed.freedBytes;
      after = last;
      await pause(performance.now() - started);
    } while (after !== null);
    return swept;
  }

  /** The bytes freed, or null when something still names the digest. */
  async #releaseOne(digest: string): Promise<number | null> {
    const { store, commits, blobs, modelFile } = this.#deps;
    if (modelFile(digest) || await store.blobs.blobNamed(digest)) return null;
    const record = await store.blobs.getBlob(digest);
    if (!record && !(await blobs.has(digest))) return null;
    commits.write(() => {
      store.blobs.deleteBlob(digest);
      this.#deps.pictures.forget(digest);
    });
    await commits.durable();
    await blobs.remove(digest);
    return record?.bytes ?? 0;
  }
}
