import type { PipelineAccepted, PipelineView } from '../../protocol/api/index.js';
import type { Clock } from '../../protocol/clock.js';
import { isTerminal, MeshError, type JobStatus, type SubmitPipelineBody } from '../../protocol/index.js';
import type { VerifiedGrant } from '../auth/index.js';
import type { JobRecord, MeshStore, PipelineRecord } from '../store/index.js';
import { callbackFor, namedCallback, type Webhooks } from '../webhooks/index.js';
import { newId } from '../store/ids.js';
import type { JobAdmission } from './admission.js';
import type { Cancellation } from './cancellation.js';
import type { PipelineEnds } from './pipeline-ends.js';
import { planPipeline } from './pipeline-plan.js';
import type { Authorize, JobReads } from './reads.js';

export interface PipelinesDeps {
  store: MeshStore;
  clock: Clock;
  admission: Pick<JobAdmission, 'submitChain'>;
  reads: Pick<JobReads, 'record' | 'viewOf'>;
  cancellation: Pick<Cancellation, 'cancel'>;
  /** Callbacks: a pipeline's (or its grant's) callback URL checked against the allowlist; none: no callbacks (role tests). */
  webhooks?: Pick<Webhooks, 'check'>;
  /** Where a pipeline with a callback is armed, and its end told. */
  ends?: Pick<PipelineEnds, 'arm' | 'forget'>;
}

/** A pipeline's links: itself, and its steps' event stream. */
export const pipelineLinks = (id: string): PipelineAccepted['links'] => ({ self: `/v1/pipelines/${id}`, events: `/v1/pipelines/${id}/events` });

/** Where a pipeline stands, from its steps' states (PIPELINE_STATUSES). */
export function pipelineStatus(statuses: readonly JobStatus[]): PipelineView['status'] {
  if (statuses.some((status) => !isTerminal(status))) return 'running';
  const other = statuses.find((status) => status !== 'succeeded');
  return (other ?? 'succeeded') as PipelineView['status'];
}

/**
 * Pipelines: steps submitted at once (`POST /v1/pipelines`), each a job like any other, later ones taking earlier
 * ones' outputs by reference. Checked whole (planPipeline, then every job's admission) before anything is stored; one
 * id to follow (its row names the steps' jobs); cancelling it cancels what has not ended; with a callback URL, its end
 * is POSTed once (PipelineEnds). A pipeline belongs to the grant lineage that submitted it: another lineage is told it
 * does not exist.
 */
export class Pipelines {
  readonly #deps: PipelinesDeps;

  constructor(deps: PipelinesDeps) {
    this.#deps = deps;
  }

  async submit(grant: VerifiedGrant, body: SubmitPipelineBody, authorize: Authorize): Promise<PipelineAccepted> {
    const { store, clock, webhooks, ends } = this.#deps;
    const plan = planPipeline(body, () => newId('j'));
    // Its own callback URL (a grant's `webhook` caveat refuses any other: GRANT_DENIED), else its grant's; allowed or
    // WEBHOOK_NOT_ALLOWED, before anything is admitted.
    const named = namedCallback(body.webhook);
    if (named !== undefined) authorize({ action: 'jobs:submit', webhook: named });
    const callback = callbackFor(named, grant, webhooks && ((url) => webhooks.check(url)));
    const id = newId('p');
    // The steps in dependency order, as admitted: a pipeline's view and its cancel follow that order.
    const record: PipelineRecord = { id, grantId: grant.id, createdAt: clock.now(), steps: plan.steps.map((step) => ({ id: step.id, jobId: step.jobId })) };
    let jobs: JobRecord[];
    try {
      jobs = await this.#deps.admission.submitChain(grant, plan, authorize, () => {
        store.pipelines.insertPipeline(record);
        if (callback !== null) ends?.arm(record, callback);
      });
    } catch (error) {
      // Its jobs were taken back (a commit that failed): there is no pipeline to call back about.
      ends?.forget(id);
      throw error;
    }
    return { id, steps: plan.steps.map((step, index) => ({ id: step.id, jobId: step.jobId, status: jobs[index]!.status })), links: pipelineLinks(id) };
  }

  /** A pipeline of the grant's lineage; NOT_FOUND otherwise. */
  async record(grant: VerifiedGrant, id: string): Promise<PipelineRecord> {
    const pipeline = await this.#deps.store.pipelines.getPipeline(id);
    if (!pipeline || pipeline.grantId !== grant.id) throw new MeshError('NOT_FOUND', { what: `Pipeline ${id}` });
    return pipeline;
  }

  async get(grant: VerifiedGrant, id: string): Promise<PipelineView> {
    const pipeline = await this.record(grant, id);
    const steps = await Promise.all(pipeline.steps.map(async (step) => ({ id: step.id, job: await this.#deps.reads.viewOf(await this.#deps.reads.record(grant, step.jobId)) })));
    return {
      id, status: pipelineStatus(steps.map((step) => step.job.status)), createdAt: new Date(pipeline.createdAt).toISOString(), steps, links: pipelineLinks(id),
    };
  }

  /** Cancel every step that has not ended, the last first (so no step fails for a source cancelled before it). */
  async cancel(grant: VerifiedGrant, id: string, authorize: Authorize): Promise<PipelineView> {
    const pipeline = await this.record(grant, id);
    const jobs = await Promise.all(pipeline.steps.map((step) => this.#deps.reads.record(grant, step.jobId)));
    for (const job of jobs) authorize({ action: 'jobs:cancel', jobType: job.type, model: job.model, album: job.album });
    for (const job of [...jobs].reverse()) if (!isTerminal(job.status)) this.#deps.cancellation.cancel(job.id);
    return this.get(grant, id);
  }
}
