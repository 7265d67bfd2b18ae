import type { JobView } from '../../protocol/api/index.js';
import { isTerminal, MeshError } from '../../protocol/index.js';
import type { VerifiedGrant } from '../auth/index.js';
import type { Cancellation } from './cancellation.js';
import type { Authorize, JobReads } from './reads.js';
import type { JobStates } from './states.js';

export interface ClientCancelDeps {
  reads: Pick<JobReads, 'record' | 'viewOf'>;
  cancellation: Pick<Cancellation, 'cancel'>;
  states: Pick<JobStates, 'get'>;
}

/** A client cancelling a job (`DELETE /v1/jobs/:id`): one its grant may see and may cancel, answered with its view. */
export class ClientCancel {
  readonly #deps: ClientCancelDeps;

  constructor(deps: ClientCancelDeps) {
    this.#deps = deps;
  }

  async cancel(grant: VerifiedGrant, id: string, authorize: Authorize): Promise<JobView> {
    const job = await this.#deps.reads.record(grant, id);
    authorize({ action: 'jobs:cancel', jobType: job.type, model: job.model, album: job.album });
    if (isTerminal(job.status) || !this.#deps.cancellation.cancel(id)) {
      throw new MeshError('JOB_NOT_CANCELLABLE', { id, status: (await this.#deps.states.get(id))?.status ?? job.status });
    }
    return this.#deps.reads.viewOf(job);
  }
}
