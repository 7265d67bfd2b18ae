import { Readable } from 'node:stream';
import type { StoredBlob } from '../../protocol/api/index.js';
import { MeshError, sha256Digest, type ArtifactReport } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { BlobStore } from '../blobs/blob-store.js';
import type { DigestLocks } from '../blobs/digest-locks.js';
import { checkOutput, OutputCheck, outputTypesOf } from '../blobs/output-media.js';
import type { Commits, MeshStore } from '../store/index.js';
import type { JobStates } from './states.js';

export interface JobOutputsDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  blobs: BlobStore;
  states: JobStates;
  /** Largest output accepted. */
  limitBytes: number;
  /** Storing an output and recording it is done under its digest's lock (see DigestLocks). */
  locks: DigestLocks;
}

/**
 * The outputs agents deliver for jobs, stored in the content-addressed blob
 * store either way they arrive: uploaded over HTTP (hashed while they stream,
 * refused if the digest differs, and recorded as uploaded for the job, which
 * is what lets a later `done` name them), or inline in the `done` report
 * itself (hashed before they are kept). Either way their bytes must be what
 * their media type says, and the type one the job type may produce
 * (registry/output-media.ts), before anything is stored or recorded: the blob
 * route serves them from the orchestrator's own origin.
 */
export class JobOutputs {
  readonly #deps: JobOutputsDeps;

  constructor(deps: JobOutputsDeps) {
    this.#deps = deps;
  }

  /** Store one uploaded output of a job in `batchId` (the batch the credential was minted for); resolves once committed. */
  async receive(
    upload: { jobId: string; batchId: string; digest: string; mediaType: string }, body: Readable,
  ): Promise<StoredBlob> {
    const { store, commits, clock } = this.#deps;
    const { jobId, batchId, digest, mediaType } = upload;
    const job = this.#deps.states.active(jobId) ?? await this.#deps.states.get(jobId);
    if (!job) throw new MeshError('NOT_FOUND', { what: `Job ${jobId}` });
    if (job.batchId !== batchId || (job.status !== 'dispatched' && job.status !== 'running')) {
      throw new MeshError('GRANT_DENIED', { caveat: `batch ${batchId}`, detail: `job ${jobId} is not running in that batch` });
    }
    // The upload is recorded under its job: a job written only when it ends (JobStates.create, deferred) is written now,
    // so that no record names a job a crash could leave unwritten.
    await this.#deps.states.persist(job);
    // A type the job may not produce is refused before a byte is read; bytes that are not of their type, once all are in
    // — before the blob is renamed into place, so neither the blob nor the upload is recorded.
    const check = new OutputCheck(job.type, mediaType);
    // Held from the first byte stored to the record: bytes of this digest are not reclaimed in between.
    const stored = await this.#deps.locks.holding([digest], async () => {
      const kept = await this.#deps.blobs.putStream(Readable.from(checked(body, check), { objectMode: false }), { expected: digest, limit: this.#deps.limitBytes });
      await this.#assertSameType(digest, mediaType);
      const now = clock.now();
      commits.write(() => {
        store.blobs.recordBlob({ digest, bytes: kept.bytes, mediaType }, now);
        store.blobs.recordUpload(jobId, digest, now);
      });
      return kept;
    });
    await commits.durable();
    return { digest, bytes: stored.bytes, mediaType };
  }

  /**
   * Keep an output of a `jobType` job that came inline in a report (small: stored at once once checked); DIGEST_MISMATCH
   * if its bytes are not what it claims, UNSUPPORTED_MEDIA_TYPE if they are not of its media type or the type is not
   * one the job type may produce. Nothing is stored unless all holds. The caller holds the digest's lock until the
   * job is published with it (ResultIntake): until then, nothing but that lock keeps the bytes from being reclaimed.
   */
  async keepInline(jobType: string, artifact: ArtifactReport & { inline: string }): Promise<void> {
    const bytes = Buffer.from(artifact.inline, 'base64');
    if (bytes.length !== artifact.bytes) throw new MeshError('DIGEST_MISMATCH', { expected: `${artifact.bytes} bytes`, actual: `${bytes.length} bytes` });
    const digest = sha256Digest(bytes);
    if (digest !== artifact.digest) throw new MeshError('DIGEST_MISMATCH', { expected: artifact.digest, actual: digest });
    await checkOutput(jobType, artifact.mediaType, bytes);
    await this.#assertSameType(digest, artifact.mediaType);
    // The local store keeps these without leaving the event loop; a store that cannot (a bucket) puts them asynchronously.
    const store = this.#deps.blobs;
    if (store.putSmallSync) store.putSmallSync(bytes, digest);
    else await store.putBytes(bytes, digest);
    this.#deps.commits.writeOne(() => this.#deps.store.blobs.recordBlob({ digest, bytes: bytes.length, mediaType: artifact.mediaType }, this.#deps.clock.now()));
  }

  /**
   * Why the outputs a `jobType` job's report names as uploaded cannot be published as reported, or null: each must
   * have been stored (checked) with the media type the report gives it, one the job type may produce — the type the
   * bytes were checked against is what counts, not what the report says. Outputs never uploaded are not this check's.
   */
  async mislabelled(jobType: string, artifacts: readonly ArtifactReport[]): Promise<string | null> {
    for (const artifact of artifacts) {
      if (artifact.inline !== undefined) continue;
      const record = await this.#deps.store.blobs.getBlob(artifact.digest);
      if (!record) continue;
      if (record.mediaType !== artifact.mediaType) {
        return `output ${artifact.digest} was reported as ${artifact.mediaType.slice(0, 100)} but stored as ${record.mediaType}`;
      }
      if (!outputTypesOf(jobType).includes(record.mediaType)) return `output ${artifact.digest} is ${record.mediaType}, not an output type of ${jobType} jobs`;
    }
    return null;
  }

  /** A blob is recorded with one media type, the first it was stored with: another for the same bytes is refused. */
  async #assertSameType(digest: string, mediaType: string): Promise<void> {
    const record = await this.#deps.store.blobs.getBlob(digest);
    if (record && record.mediaType !== mediaType) {
      throw new MeshError('UNSUPPORTED_MEDIA_TYPE', { detail: `the blob ${digest} is stored as ${record.mediaType}, not ${mediaType.slice(0, 100)}` });
    }
  }

  wasUploaded(jobId: string, digest: string): Promise<boolean> {
    return this.#deps.store.blobs.wasUploadedFor(jobId, digest);
  }

  /** The size and media type recorded for a blob when it was stored. */
  blobRecord(digest: string): Promise<{ bytes: number; mediaType: string } | null> {
    return this.#deps.store.blobs.getBlob(digest);
  }
}

/**
 * `body`, passed through `check` on its way to the store. The verdict comes once all of it is in: an upload that is
 * refused was read whole, so its client gets the answer rather than a reset connection.
 */
async function* checked(body: Readable, check: OutputCheck): AsyncGenerator<Buffer> {
  for await (const chunk of body as AsyncIterable<Buffer>) {
    check.push(chunk);
    yield chunk;
  }
  await check.finish();
}
