import { Readable } from 'node:stream';
import { MeshError, sha256Digest, type ArtifactReport } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
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
 * The outputs agents deliver for jobs, stored in the content-addressed blob
 * store either way they arrive: uploaded over HTTP (hashed while they stream,
 * refused if the digest differs, and recorded as uploaded for the job, which
 * is what lets a later `done` name them), or inline in the `done` report
 * itself (hashed before they are kept).
 */
export class JobOutputs {
  readonly #deps: JobOutputsDeps;

  constructor(deps: JobOutputsDeps) {
    this.#deps = deps;
  }

  /** Store one uploaded output of a job in `batchId` (the batch the credential was minted for); resolves once committed. */
  async receive(
    upload: { jobId: string; batchId: string; digest: string; mediaType: string }, body: Readable,
  ): Promise<{ digest: string; bytes: number; mediaType: string }> {
    const { db, commits, clock } = this.#deps;
    const { jobId, batchId, digest, mediaType } = upload;
    const job = this.#deps.states.get(jobId);
    if (!job) throw new MeshError('NOT_FOUND', { what: `Job ${jobId}` });
    if (job.batchId !== batchId || (job.status !== 'dispatched' && job.status !== 'running')) {
      throw new MeshError('GRANT_DENIED', { caveat: `batch ${batchId}`, detail: `job ${jobId} is not running in that batch` });
    }
    const stored = await this.#deps.blobs.putStream(body, { expected: digest, limit: this.#deps.limitBytes });
    const now = clock.now();
    commits.write(() => {
      blobs.recordBlob(db, { digest, bytes: stored.bytes, mediaType }, now);
      blobs.recordUpload(db, jobId, digest, now);
    });
    await commits.durable();
    return { digest, bytes: stored.bytes, mediaType };
  }

  /** Keep an output that came inline in a report (small: stored at once, in this tick); DIGEST_MISMATCH if its bytes are not what it claims. */
  keepInline(artifact: ArtifactReport & { inline: string }): void {
    const bytes = Buffer.from(artifact.inline, 'base64');
    if (bytes.length !== artifact.bytes) throw new MeshError('DIGEST_MISMATCH', { expected: `${artifact.bytes} bytes`, actual: `${bytes.length} bytes` });
    this.#deps.blobs.putSmallSync(bytes, artifact.digest);
    this.#deps.commits.writeOne(() => blobs.recordBlob(this.#deps.db, { digest: artifact.digest, bytes: bytes.length, mediaType: artifact.mediaType }, this.#deps.clock.now()));
  }

  wasUploaded(jobId: string, digest: string): boolean {
    return blobs.wasUploadedFor(this.#deps.db, jobId, digest);
  }

  /** The size and media type recorded for a blob when it was stored. */
  blobRecord(digest: string): { bytes: number; mediaType: string } | null {
    return blobs.getBlob(this.#deps.db, digest);
  }
}
