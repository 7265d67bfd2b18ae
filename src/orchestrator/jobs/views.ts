import type { ArtifactView, JobView } from '../../protocol/index.js';
import { artifacts, attempts, type ArtifactRecord, type Db, type JobRecord } from '../store/index.js';

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

export function blobUrl(digest: string): string {
  return `/v1/blobs/${digest}`;
}

export function artifactView(record: ArtifactRecord): ArtifactView {
  return {
    digest: record.digest, mediaType: record.mediaType, bytes: record.bytes, url: blobUrl(record.digest),
    jobId: record.jobId, model: record.model, host: record.host, type: record.type, prompt: record.prompt,
    album: record.album, width: record.width, height: record.height, computeMs: record.computeMs, totalMs: record.totalMs,
    createdAt: new Date(record.createdAt).toISOString(),
  };
}

/** The API's view of a job: the row, its attempts and, once it succeeded, its artifacts. */
export function jobView(db: Db, job: JobRecord): JobView {
  return {
    id: job.id, type: job.type, model: job.model, status: job.status, priority: job.priority, album: job.album,
    input: job.input, createdAt: new Date(job.createdAt).toISOString(), updatedAt: new Date(job.updatedAt).toISOString(),
    finishedAt: iso(job.finishedAt), deadlineAt: iso(job.deadlineAt),
    attempts: attempts.listAttempts(db, job.id),
    batch: job.batchId ? { id: job.batchId, size: job.batchSize ?? 1 } : null,
    artifacts: job.status === 'succeeded' ? artifacts.artifactsOfJob(db, job.id).map(artifactView) : [],
    result: job.result,
    error: job.errorCode ? { code: job.errorCode, message: job.errorMessage ?? '' } : null,
    links: { self: `/v1/jobs/${job.id}`, events: `/v1/jobs/${job.id}/events` },
  };
}
