import type { Logger } from 'pino';
import { MeshError, type ErrorBody } from '../../protocol/index.js';
import { picturesNamed } from '../blobs/input-images.js';
import type { JobCaps, JobRecord, MeshStore } from '../store/index.js';
import type { Dispatcher } from './dispatcher.js';
import { pickOutput, referencesIn, sourcesOf, type InputReference } from './references.js';
import type { JobStates } from './states.js';

/** The pictures a released job names are judged as any client's are (InputImages): decoded once, by digest. */
export interface SourcePictures {
  prepare(digests: readonly string[]): Promise<void> | null;
  sizeOf(digest: string): { width: number; height: number } | null;
}

export interface JobSourcesDeps {
  store: MeshStore;
  states: JobStates;
  dispatcher: Dispatcher;
  /** Absent (role tests): a source's output is taken by its media type alone. */
  pictures?: SourcePictures;
  /**
   * The caps of a job's grant lineage checked as admission checks them, for one more job in its queue (LineageCaps.check:
   * QUEUED_CAP_REACHED, DEVICE_TIME_CAP_REACHED); absent (role tests): caps are not enforced.
   */
  checkCaps?(job: JobRecord, caps: JobCaps): void;
  log: Logger;
}

/**
 * Jobs that take other jobs' outputs (`waiting`): each waits for its sources, by id, in memory — filled at admission
 * and, after a restart, from the waiting jobs the store holds. When a source ends, the jobs waiting for it are settled:
 * released into their queues once every source succeeded (each reference replaced by the output's digest, recorded as
 * a picture the job names so its host may read it — the output moves by digest, never through the client), or failed
 * at once, naming the source, when one did not succeed. A failed dependent ends like any job, so its own dependents
 * fail in turn.
 *
 * Release is a second admission into a queue, so its grant's caps (`max-queued`, `device-seconds-per-day`, kept with
 * the job: JobTable.recordCaps) are checked again then: a job its lineage's use no longer leaves room for fails with
 * the code a submit would get. It does not wait for room: caps refuse rather than hold (a submit gets a 429 and its
 * client decides when to try again), and a job held back indefinitely would hide the refusal from the client that is
 * following it; its failure names the cap, so the client may submit it again by its source's output.
 */
export class JobSources {
  readonly #deps: JobSourcesDeps;
  /** Source job id → the ids of the jobs waiting for it. */
  readonly #waiting = new Map<string, Set<string>>();

  constructor(deps: JobSourcesDeps) {
    this.#deps = deps;
    deps.states.onTerminal((job) => {
      const dependents = this.#waiting.get(job.id);
      if (!dependents) return;
      this.#waiting.delete(job.id);
      for (const id of dependents) this.#settleLater(id);
    });
  }

  /** A waiting job (just admitted, or restored after a restart): settled when its sources end, or now if they have. */
  watch(job: JobRecord): void {
    let pending = false;
    for (const source of sourcesOf(job.input)) {
      if (!this.#deps.states.active(source)) continue;
      pending = true;
      let dependents = this.#waiting.get(source);
      if (!dependents) this.#waiting.set(source, dependents = new Set());
      dependents.add(job.id);
    }
    if (!pending) this.#settleLater(job.id);
  }

  /** The jobs a waiting job waits for, with where each stands (explain). */
  async sourcesOf(job: JobRecord): Promise<{ id: string; status: string }[]> {
    return Promise.all(sourcesOf(job.input).map(async (id) => ({ id, status: (await this.#deps.states.get(id))?.status ?? 'gone' })));
  }

  #settleLater(id: string): void {
    void this.#settle(id).catch((error: unknown) => {
      this.#deps.log.error({ err: error, jobId: id }, 'could not settle a job that waits for its sources');
      const job = this.#deps.states.active(id);
      if (job?.status === 'waiting') this.#deps.states.ended(job, 'failed', new MeshError('INTERNAL', { detail: `settling its sources failed: ${(error as Error).message}` }));
    });
  }

  async #settle(id: string): Promise<void> {
    const { states, store } = this.#deps;
    const waiting = (): JobRecord | null => {
      const job = states.active(id);
      return job?.status === 'waiting' ? job : null;
    };
    const job = waiting();
    if (!job) return;
    const references = referencesIn(job.input);
    const digests = new Map<InputReference, string>();
    for (const reference of references) {
      // A source still unfinished will settle this job again when it ends.
      if (states.active(reference.fromJob)) return;
      const source = await states.get(reference.fromJob);
      if (!waiting()) return;
      if (source?.status !== 'succeeded') {
        this.#fail(job, reference, source?.status ?? 'gone (deleted)', source?.errorCode ? { code: source.errorCode, message: source.errorMessage ?? '' } : null);
        return;
      }
      const picked = pickOutput(await store.artifacts.artifactsOfJob(source.id), reference);
      if ('refusal' in picked) {
        this.#end(job, new MeshError('BAD_REFERENCE', { field: `input.${reference.field}`, detail: picked.refusal }));
        return;
      }
      digests.set(reference, picked.digest);
    }
    const { pictures } = this.#deps;
    await pictures?.prepare([...digests.values()]);
    const caps = this.#deps.checkCaps ? await store.jobs.capsOf(id) : null;
    const current = waiting();
    if (!current) return;
    const input = { ...current.input };
    for (const [reference, digest] of digests) {
      if (pictures && !pictures.sizeOf(digest)) {
        this.#end(current, new MeshError('BAD_REFERENCE', { field: `input.${reference.field}`, detail: `output ${reference.output} of job ${reference.fromJob} (${digest}) is not a picture gpumesh decodes, or is no longer stored` }));
        return;
      }
      input[reference.field] = digest;
    }
    if (caps) {
      // In the turn of the release itself, so the queue it is counted against is the one it joins.
      try {
        this.#deps.checkCaps!(current, caps);
      } catch (error) {
        if (!(error instanceof MeshError)) throw error;
        this.#end(current, error);
        return;
      }
    }
    if (!states.released(current, input, () => {
      for (const digest of picturesNamed(input)) store.inputImages.recordJobInput(digest, current.id);
    })) return;
    this.#deps.dispatcher.enqueue(current);
  }

  #fail(job: JobRecord, reference: InputReference, status: string, cause: ErrorBody | null): void {
    this.#end(job, new MeshError('SOURCE_FAILED', {
      source: reference.fromJob, status, cause: cause ? ` (${cause.code}: ${cause.message})` : '', field: `input.${reference.field}`,
    }));
  }

  #end(job: JobRecord, error: MeshError): void {
    this.#deps.states.ended(job, 'failed', error);
  }
}
