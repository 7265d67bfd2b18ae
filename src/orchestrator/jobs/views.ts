import type { ArtifactView, AttemptView, JobEvent, JobView } from '../../protocol/api/index.js';
import { decodeRoute } from '../routing/index.js';
import { sourcesOf } from './references.js';
import type { ArtifactRecord, JobRecord, MeshStore } from '../store/index.js';

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

export function blobUrl(digest: string): string {
  return `/v1/blobs/${digest}`;
}

export function artifactView(record: ArtifactRecord): ArtifactView {
  return {
    digest: record.digest, mediaType: record.mediaType, bytes: record.bytes, url: blobUrl(record.digest),
    jobId: record.jobId, model: record.model, host: record.host, type: record.type, prompt: record.prompt,
    album: record.album, width: record.width, height: record.height, computeMs: record.computeMs, totalMs: record.totalMs,
    energyWh: record.energyJ === null ? null : record.energyJ / 3600,
    createdAt: new Date(record.createdAt).toISOString(),
  };
}

/**
 * A job's attempts: those that ended without success, from the store; the one in flight, and the one that
 * succeeded, from the job's own row (each is kept there, migration 11).
 */
async function attemptsOf(store: MeshStore, job: JobRecord): Promise<AttemptView[]> {
  // A job that succeeded at its first attempt has no attempt that ended otherwise: nothing to read (a job's every
  // failed, lost or cancelled attempt counts in `attempts`; one from before migration 11 has no attempt host).
  if (job.status === 'succeeded' && job.attempts === 1 && job.attemptHost) return [attemptOnRow(job, job.attemptHost, 'succeeded')];
  const ended = await store.attempts.listAttempts(job.id, decodeRoute);
  if (!job.batchId || ended.some((attempt) => attempt.n === job.attempts)) return ended;
  if ((job.status === 'dispatched' || job.status === 'running') && job.leaseHost) ended.push(attemptOnRow(job, job.leaseHost, 'running'));
  else if (job.status === 'succeeded' && job.attemptHost) ended.push(attemptOnRow(job, job.attemptHost, 'succeeded'));
  return ended;
}

function attemptOnRow(job: JobRecord, host: string, status: 'running' | 'succeeded'): AttemptView {
  const ended = status === 'succeeded';
  return {
    n: job.attempts, host, replica: `${host}/${job.model}`, batchId: job.batchId!, batchSize: job.batchSize ?? 1, status,
    dispatchedAt: new Date(job.dispatchedAt ?? job.updatedAt).toISOString(), startedAt: iso(job.startedAt),
    finishedAt: ended ? iso(job.finishedAt) : null, loadMs: job.loadMs ?? null, computeMs: ended ? job.computeMs : null,
    error: null, route: decodeRoute(job.route),
  };
}

/** The API's view of a job: the row, its attempts and, once it succeeded, its artifacts. */
export async function jobView(store: MeshStore, job: JobRecord): Promise<JobView> {
  const [attempts, artifacts] = await Promise.all([
    attemptsOf(store, job), job.status === 'succeeded' && job.artifactCount !== 0 ? store.artifacts.artifactsOfJob(job.id) : [],
  ]);
  return {
    id: job.id, type: job.type, model: job.model, status: job.status, priority: job.priority, album: job.album,
    input: job.input, createdAt: new Date(job.createdAt).toISOString(), updatedAt: new Date(job.updatedAt).toISOString(),
    finishedAt: iso(job.finishedAt), deadlineAt: iso(job.deadlineAt),
    attempts,
    batch: job.batchId ? { id: job.batchId, size: job.batchSize ?? 1 } : null,
    artifacts: artifacts.map(artifactView),
    result: job.result,
    error: job.errorCode ? { code: job.errorCode, message: job.errorMessage ?? '' } : null,
    links: { self: `/v1/jobs/${job.id}`, events: `/v1/jobs/${job.id}/events` },
  };
}

/** The events that describe where a job stands now, for a client that connects late. */
export async function snapshotEvents(store: MeshStore, job: JobRecord): Promise<JobEvent[]> {
  const at = new Date(job.updatedAt).toISOString();
  const created = new Date(job.createdAt).toISOString();
  if (job.status === 'waiting') return [{ type: 'waiting', jobId: job.id, model: job.model, jobType: job.type, prompt: job.prompt, for: sourcesOf(job.input), at: created }];
  const events: JobEvent[] = [{ type: 'queued', jobId: job.id, model: job.model, jobType: job.type, prompt: job.prompt, at: created }];
  if ((job.status === 'dispatched' || job.status === 'running') && job.leaseHost && job.batchId) {
    events.push({
      type: 'dispatched', jobId: job.id, host: job.leaseHost, replica: `${job.leaseHost}/${job.model}`, batchId: job.batchId,
      batchSize: job.batchSize ?? 1, attempt: job.attempts, at,
    });
    if (job.status === 'running' && job.loadMs) events.push({ type: 'loading', jobId: job.id, model: job.model, host: job.leaseHost, loadMs: job.loadMs, at });
    if (job.status === 'running') events.push({ type: 'running', jobId: job.id, host: job.leaseHost, at });
  }
  const finishedAt = new Date(job.finishedAt ?? job.updatedAt).toISOString();
  if (job.status === 'succeeded') {
    events.push({ type: 'succeeded', jobId: job.id, result: job.result, at: finishedAt, artifacts: (await store.artifacts.artifactsOfJob(job.id)).map(artifactView) });
  } else if (job.status === 'failed') {
    events.push({ type: 'failed', jobId: job.id, at: finishedAt, error: { code: job.errorCode ?? 'INTERNAL', message: job.errorMessage ?? '' } });
  } else if (job.status === 'cancelled' || job.status === 'expired') {
    events.push({ type: job.status, jobId: job.id, at: finishedAt });
  }
  return events;
}
