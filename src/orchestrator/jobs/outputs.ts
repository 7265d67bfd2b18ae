import type { Readable } from 'node:stream';
import { MeshError } from '../../protocol/index.js';
import type { Clock } from '../clock.js';
import type { BlobStore } from '../registry/index.js';
import { blobs, type Db, type GroupCommit } from '../store/index.js';
import type { JobStates } from './states.js';

export interface JobOutputsDeps {
  db: Db;
  commits: GroupCommit;
  clock: Clock;
  blobs: BlobStore;
  states: JobStates;
  /** Largest output accepted. */
  limitBytes: number;
}

/**
 * The outputs agents deliver for jobs: stored in the content-addressed blob
 * store (hashed while they stream, refused if the digest differs) and
 * recorded as uploaded for that job, which is what lets a `done` name them.
 */
export class JobOutputs {
  readonly #deps: JobOutputsDeps;

  constructor(deps: JobOutputsDeps) {
    this.#deps = deps;
  }

  /** Store one output of a job; resolves once it is committed. */
  async receive(jobId: string, digest: string, mediaType: string, body: Readable): Promise<{ digest: string; bytes: number; mediaType: string }> {
    const { db, commits, clock } = this.#deps;
    if (!this.#deps.states.get(jobId)) throw new MeshError('NOT_FOUND', { what: `Job ${jobId}` });
    const stored = await this.#deps.blobs.putStream(body, { expected: digest, limit: this.#deps.limitBytes });
    const now = clock.now();
    commits.write(() => {
      blobs.recordBlob(db, { digest, bytes: stored.bytes, mediaType }, now);
      blobs.recordUpload(db, jobId, digest, now);
    });
    await commits.durable();
    return { digest, bytes: stored.bytes, mediaType };
  }

  wasUploaded(jobId: string, digest: string): boolean {
    return blobs.wasUploadedFor(this.#deps.db, jobId, digest);
  }

  /** The size and media type recorded for a blob when it was stored. */
  blobRecord(digest: string): { bytes: number; mediaType: string } | null {
    return blobs.getBlob(this.#deps.db, digest);
  }
}
