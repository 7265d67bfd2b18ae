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
