import { createHash } from 'node:crypto';
import type { BulkItemResult } from '../../protocol/api/index.js';
import type { Clock } from '../../protocol/clock.js';
import { MeshError, SubmitJobBody } from '../../protocol/index.js';
import { memberJson } from '../../net/json-member.js';
import type { VerifiedGrant } from '../auth/index.js';
import type { CarriedPictures } from '../blobs/client-blobs.js';
import { picturesNamed, type InputImages } from '../blobs/input-images.js';
import type { MeshConfig } from '../config/config.js';
import type { MeshMetrics } from '../metrics/mesh-metrics.js';
import type { ModelRegistry, RegisteredModel } from '../registry/index.js';
import type { Admission, LineageCaps, Scheduler } from '../scheduler/index.js';
import type { AuditLog } from '../auth/audit.js';
import { callbackFor, namedCallback, type Webhooks } from '../webhooks/index.js';
import type { Commits, JobRecord, MeshStore } from '../store/index.js';
import { newId } from '../store/ids.js';
import type { BlobVisibility } from './blob-visibility.js';
import type { Cancellation } from './cancellation.js';
import type { Dispatcher } from './dispatcher.js';
import { canSee, type Authorize } from './reads.js';
import { hasReference, pickOutput, REFERENCE_STAND_IN, referencesIn, withReferences, withStandIns, type InputReference } from './references.js';
import type { PipelinePlan } from './pipeline-plan.js';
import type { JobSources } from './sources.js';
import type { JobStates } from './states.js';

/** How long an idempotency key names its job (per grant lineage). */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000;
export const DEFAULT_ALBUM = 'default';

export interface JobAdmissionDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  config: MeshConfig;
  registry: ModelRegistry;
  scheduler: Scheduler;
  admission: Admission;
  states: JobStates;
  dispatcher: Dispatcher;
  cancellation: Cancellation;
  metrics: MeshMetrics;
  /** Pictures jobs name as inputs: decoded before admission, checked at it, recorded with the job. */
  pictures: InputImages;
  /** Jobs that take other jobs' outputs wait for them here. */
  sources: Pick<JobSources, 'watch'>;
  /** Refuses a job too large for every host that could run it (MemoryPlanner.admit). */
  memory?: { admit(model: RegisteredModel, input: Record<string, unknown>, classes: readonly string[]): void };
  /** Refuses a job whose deadline comes before any host of its classes opens (all out of their hours). */
  hours?(model: RegisteredModel, classes: readonly string[], hosts: readonly string[] | null, deadlineAt: number | null): string | null;
  /** Refuses a job no host could ever take (CLASS_UNAVAILABLE: routing/class-availability.ts). */
  classes?: { admit(type: string, classes: readonly string[]): void };
  /** Refuses a workflow no connected host can run: none takes workflows, or each lacks what it names (routing/workflow-fit.ts). */
  workflows?: { admit(model: RegisteredModel, input: Record<string, unknown>, classes: readonly string[]): void };
  /** Whether the grant may read a picture a job names (one it may not is refused as if it did not exist). */
  blobs: Pick<BlobVisibility, 'assertVisible'>;
  /** The caps of grant lineages (queued jobs, device-seconds per day); none: caps are not enforced (role tests). */
  caps?: LineageCaps;
  /** Where cap refusals are recorded, one entry per request and cap. */
  audit?: Pick<AuditLog, 'record'>;
  /** Callbacks: a job's (or its grant's) callback URL checked against the allowlist, and armed with the job; none: no callbacks (role tests). */
  webhooks?: Pick<Webhooks, 'check' | 'arm'>;
}

const CAP_CODES: ReadonlySet<string> = new Set(['QUEUED_CAP_REACHED', 'DEVICE_TIME_CAP_REACHED']);

/**
 * The album of a job that names none: `default`, or — for a grant limited to
 * albums that leave `default` out — the grant's first album, so a page given
 * such a grant (the gallery) can submit without knowing its album.
 */
export function defaultAlbumOf(grant: VerifiedGrant): string {
  if (grant.albums === null || grant.albums.includes(DEFAULT_ALBUM)) return DEFAULT_ALBUM;
  return grant.albums[0] ?? DEFAULT_ALBUM;
}

/** JSON with object keys sorted, so equal values always give equal text. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, field]) => field !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, field]) => `${JSON.stringify(key)}:${canonicalJson(field)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * What an idempotency key promises is the same *request*: its type, the
 * model, priority and album it resolves to, its timeout, and its input as
 * sent (keys sorted). The input is hashed before its handling fills defaults,
 * because a missing seed is drawn at random and would differ on every retry.
 */
export function requestHash(request: { type: string; model: string; priority: number; album: string; timeoutMs: number | null; input: unknown }): string {
  const canonical = canonicalJson({
    type: request.type, model: request.model, priority: request.priority, album: request.album, timeoutMs: request.timeoutMs, input: request.input,
  });
  return `sha256:${createHash('sha256').update(canonical).digest('hex')}`;
}

/**
 * What admission needs from the store, read before the job is admitted (admission itself is synchronous, so the jobs
 * of one request are admitted in one turn): the job an idempotency key names, and the pictures the grant may not read.
 */
interface Looked {
  keyed: { entry: { id: string; requestHash: string | null } | null; job: JobRecord | null; stale: JobRecord | null } | null;
  hidden: ReadonlySet<string>;
  /**
   * The jobs its references name (null: no such job), and the outputs of those that succeeded; absent when it names
   * none. `admitted`: jobs of the same request admitted before it (a pipeline's earlier steps), not yet in the store.
   */
  sources?: ReadonlyMap<string, { job: JobRecord | null; outputs: readonly { digest: string; mediaType: string }[] }>;
}

const NOTHING_LOOKED: Looked = { keyed: null, hidden: new Set() };
const NO_REFERENCES: readonly InputReference[] = [];

/** Run one pipeline step's check or admission; a 400 it throws is a PIPELINE_INVALID naming the step. */
function stepped<T>(step: { id: string; index: number }, run: () => T): T {
  try {
    return run();
  } catch (error) {
    if (error instanceof MeshError && error.status === 400 && error.code !== 'PIPELINE_INVALID') {
      throw new MeshError('PIPELINE_INVALID', { field: `steps.${step.index} ("${step.id}")`, detail: `${error.code}: ${error.message}` }, { cause: error });
    }
    throw error;
  }
}

/** The size a waiting job's stand-in picture is taken to have: its first source's, where its input names one. */
function sourceSize(pending: readonly InputReference[], looked: Looked): { width: number; height: number } | null {
  const source = pending[0] ? looked.sources?.get(pending[0].fromJob)?.job : null;
  const { width, height } = source?.input ?? {};
  return typeof width === 'number' && typeof height === 'number' ? { width, height } : null;
}
const NO_PICTURES: ReadonlySet<string> = new Set();

interface AdmitOptions {
  waited?: boolean;
  id?: string;
  bodyJson?: string;
}

/**
 * The input's JSON as its client sent it, cut from the body's text, where the input admitted is exactly the one sent:
 * each member the same value, in the same order (a tensor's `x`: its numbers are most of the job's row, and writing
 * them out again was the largest cost of storing it), and no member named twice in the text (the store's own JSON
 * functions would read the first where the job ran with the last: a gallery's prompt). Null where the handling of its
 * job type made another input (filled defaults, a normal form) or no text is at hand: the row's input is then written
 * out.
 */
function sentInput(bodyJson: string | undefined, body: SubmitJobBody, input: Record<string, unknown>): string | null {
  if (bodyJson === undefined) return null;
  const sent = Object.keys(body.input);
  const admitted = Object.keys(input);
  if (sent.length !== admitted.length) return null;
  for (let i = 0; i < sent.length; i++) {
    const key = sent[i]!;
    if (admitted[i] !== key || !Object.is(input[key], body.input[key])) return null;
  }
  const cut = memberJson(bodyJson, 'input');
  return cut?.members === sent.length ? cut.json : null;
}

/** One job through every check of admission (`#vet`): what admitting it takes, or the job an idempotent repeat gets back. */
interface Vetted {
  /** The references whose sources have not succeeded yet: the job waits for them. */
  pending: readonly InputReference[];
  model: RegisteredModel;
  priority: number;
  album: string;
  classes: string[];
  input: Record<string, unknown>;
  hash: string | null;
  repeat: JobRecord | null;
  /** What it waits for when every host that could run it is out of its hours (its `queued` event says so); else null. */
  waitsFor: string | null;
  /** Where its end is POSTed (its own callback URL, else its grant's), in normal form; null: nowhere. */
  webhook: string | null;
}

/**
 * Admission: a client's jobs checked against its grant, the job types, the models, the queues' bounds and the grant's
 * rates, then created, queued and armed — one job, several as one request (all or none), or a bulk submit (each on its
 * own) — each answered once it is committed.
 */
export class JobAdmission {
  readonly #deps: JobAdmissionDeps;

  constructor(deps: JobAdmissionDeps) {
    this.#deps = deps;
  }

  /**
   * Admit a job; resolves once it is committed (the 202 promises the job is stored). `created` is false for an
   * idempotent repeat. `waited`: the client waits for the job's end on this request (OIP infer, `Prefer: wait`), so
   * the job is written when it ends (JobStates.create, deferred) and this resolves at once; a route that then
   * answers before its end (a wait that ran out, a grant that may not read the job) calls `persist` first.
   * `bodyJson`: the body as its client sent it (the JSON text `body` was parsed from), for storing the input as it came.
   */
  async submit(grant: VerifiedGrant, body: SubmitJobBody, authorize: Authorize, waited = false, bodyJson?: string): Promise<{ job: JobRecord; created: boolean }> {
    const looking = this.#look(grant, body);
    const looked = looking ? await looking : NOTHING_LOOKED;
    const admitted = this.#capsAudited(grant, () => this.#admit(grant, body, authorize, looked, { waited, bodyJson }));
    // A job its client waits for is written when it ends (JobStates.create): nothing is promised before its answer.
    if (admitted.created && waited && !this.#deps.states.written(admitted.job)) return admitted;
    await this.#durable(admitted.created ? [admitted.job] : []);
    return admitted;
  }

  /**
   * Write a job `submit` admitted for a waiting client, now, if it is not written yet (it has not ended): its client
   * stops waiting, and what it is answered (a 202, a 504 that says the job goes on) promises the job is stored.
   */
  persist(job: JobRecord): Promise<void> {
    return this.#deps.states.persist(job);
  }

  /**
   * Admit several jobs as one request (`n` images of one prompt): all in one turn, so they can share a batch, and all
   * or none. Every check is made for all of them before any is admitted, so a refused request writes no job; only a
   * refusal that a concurrent request brought about meanwhile (a queue that filled while `carried` pictures were
   * stored) cancels those admitted before it. `carried`: pictures the request brings itself (an OpenAI edit), judged
   * but not stored — stored only once every check has passed, recorded with the jobs, taken back on that late refusal.
   */
  async submitAll(grant: VerifiedGrant, bodies: readonly SubmitJobBody[], authorize: Authorize, carried?: CarriedPictures): Promise<JobRecord[]> {
    const carrying = new Set(carried?.digests ?? []);
    const looked = await Promise.all(bodies.map((body) => this.#look(grant, body, carrying) ?? NOTHING_LOOKED));
    this.#capsAudited(grant, () => this.#vetAll(grant, bodies, authorize, looked), bodies.length);
    const stored = carried ? await carried.store() : null;
    const admitted: JobRecord[] = [];
    try {
      for (const [index, body] of bodies.entries()) admitted.push(this.#admit(grant, body, authorize, looked[index]!).job);
      // In the jobs' turn, so their commit records the pictures with them.
      stored?.admitted();
    } catch (error) {
      try {
        for (const job of admitted) this.#deps.cancellation.cancel(job.id);
        await this.#deps.commits.durable();
      } finally {
        await stored?.refused();
      }
      throw error;
    }
    await this.#durable(admitted);
    return admitted;
  }

  /**
   * Admit a pipeline's jobs (`plan`: each step a job, in dependency order, its id given) as one request, all or none,
   * like `submitAll`: every step is checked — later steps against the jobs earlier ones will be, which must be jobs the
   * grant may read — then the queues' bounds and the grant's rates for all of them, before any is admitted; then all
   * are admitted in one turn, `record` writing the pipeline's row in it. A step's 400 is a PIPELINE_INVALID naming it.
   */
  async submitChain(grant: VerifiedGrant, plan: PipelinePlan, authorize: Authorize, record: () => void): Promise<JobRecord[]> {
    const looked = await Promise.all(plan.steps.map((step) => this.#look(grant, step.body) ?? NOTHING_LOOKED));
    const { scheduler, admission, config, commits } = this.#deps;
    /** A step's Looked, with the jobs of the steps before it (not in the store yet) as sources it may name. */
    const withSteps = (index: number, jobs: ReadonlyMap<string, JobRecord>): Looked => {
      const own = looked[index]!;
      if (!own.sources) return own;
      const sources = new Map(own.sources);
      for (const id of sources.keys()) {
        const job = jobs.get(id);
        if (job) sources.set(id, { job, outputs: [] });
      }
      return { ...own, sources };
    };
    const named = new Set(plan.steps.flatMap((step) => step.after));
    this.#capsAudited(grant, () => {
      const provisional = new Map<string, JobRecord>();
      const ahead = new Map<string, number>();
      for (const [index, step] of plan.steps.entries()) {
        const vetted = stepped(step, () => this.#vet(grant, step.body, authorize, withSteps(index, provisional)));
        const name = vetted.model.manifest.name;
        // A later step reads this one's output: the grant must be one that may read it.
        if (named.has(step.id)) authorize({ action: 'jobs:read', jobType: step.body.type, model: name, album: vetted.album });
        provisional.set(step.jobId, { id: step.jobId, status: vetted.pending.length > 0 ? 'waiting' : 'queued', input: vetted.input } as JobRecord);
        const before = ahead.get(name) ?? 0;
        this.#counted(name, () => admission.checkBounds(name, scheduler.depth(name) + before, vetted.model.policy.maxQueueSize, scheduler.totalDepth + index, config.queues.maxTotal));
        ahead.set(name, before + 1);
      }
      const first = [...ahead.keys()][0]!;
      this.#counted(first, () => {
        this.#deps.caps?.check(grant.id, grant.caps, plan.steps.length, (excess) => admission.retryAfter(first, excess));
        admission.checkRate(grant.rates, plan.steps.length);
      });
    }, plan.steps.length);
    const admitted: JobRecord[] = [];
    const byId = new Map<string, JobRecord>();
    try {
      for (const [index, step] of plan.steps.entries()) {
        const { job } = stepped(step, () => this.#admit(grant, step.body, authorize, withSteps(index, byId), { id: step.jobId }));
        admitted.push(job);
        byId.set(job.id, job);
      }
      commits.write(record);
    } catch (error) {
      // Dependents first, so none of them is failed for a source cancelled here.
      for (const job of [...admitted].reverse()) this.#deps.cancellation.cancel(job.id);
      await commits.durable();
      throw error;
    }
    await this.#durable(admitted);
    return admitted;
  }

  /**
   * Wait until what this request wrote is committed, its jobs' rows with it (those written after the turn too). A
   * commit that failed (a full disk) stored none of it: the jobs it admitted are taken back from the queues — the
   * client is told they were not accepted (507 STORAGE_FULL), so none may run — and the error is the answer.
   */
  async #durable(admitted: readonly JobRecord[]): Promise<void> {
    const committed = this.#deps.commits.durable();
    try {
      await Promise.all([committed, ...admitted.map((job) => this.#deps.states.stored(job))]);
    } catch (error) {
      // A refused commit rolled back every row of its turn (those written after it too: they joined it), so those jobs
      // end without one; a single row refused (its job marked so by JobStates) leaves the others' rows to be ended.
      const rolledBack = await committed.then(() => false, () => true);
      for (const job of admitted) {
        if (rolledBack) this.#deps.states.unstored(job);
        this.#deps.cancellation.cancel(job.id);
      }
      throw error;
    }
  }

  /**
   * Every check admission would make of these jobs together, taking and writing nothing: each job's own (`#vet`), then
   * the queues' bounds and the grant's rates with room for all of them.
   */
  #vetAll(grant: VerifiedGrant, bodies: readonly SubmitJobBody[], authorize: Authorize, looked: readonly Looked[]): void {
    const { scheduler, admission, config } = this.#deps;
    const ahead = new Map<string, number>();
    let total = 0;
    for (const [index, body] of bodies.entries()) {
      const vetted = this.#vet(grant, body, authorize, looked[index]!);
      if (vetted.repeat) continue;
      const name = vetted.model.manifest.name;
      const before = ahead.get(name) ?? 0;
      this.#counted(name, () => admission.checkBounds(name, scheduler.depth(name) + before, vetted.model.policy.maxQueueSize, scheduler.totalDepth + total, config.queues.maxTotal));
      ahead.set(name, before + 1);
      total++;
    }
    if (total === 0) return;
    const first = [...ahead.keys()][0]!;
    this.#counted(first, () => {
      this.#deps.caps?.check(grant.id, grant.caps, total, (excess) => admission.retryAfter(first, excess));
      admission.checkRate(grant.rates, total);
    });
  }

  /**
   * Admit many jobs at once (the counterpart of BullMQ's addBulk): each is
   * validated, authorized and admitted or refused on its own, all in one
   * group commit; resolves once the admitted ones are committed.
   */
  async submitMany(grant: VerifiedGrant, items: readonly unknown[], authorize: Authorize): Promise<BulkItemResult[]> {
    const parsed = items.map((item) => SubmitJobBody.safeParse(item));
    // Everything the items need from the store is read first, so they are all admitted in one turn (and can share a
    // batch); an item may name the idempotency key of one before it, which the store has not seen yet: `keyed`.
    const looked = await Promise.all(parsed.map((item) => (item.success ? this.#look(grant, item.data) : null) ?? NOTHING_LOOKED));
    const keyed = new Map<string, NonNullable<Looked['keyed']>>();
    const admittedNow: JobRecord[] = [];
    const capped = new Map<string, { error: MeshError; jobs: number }>();
    const results = parsed.map((item, index): BulkItemResult => {
      if (!item.success) {
        const detail = item.error.issues.map((issue) => `jobs.${index}${issue.path.map((part) => `.${String(part)}`).join('')}: ${issue.message}`).join('; ');
        return { status: 400, error: new MeshError('VALIDATION_FAILED', { detail }).toJSON() };
      }
      const key = item.data.idempotencyKey;
      const earlier = key ? keyed.get(key) : undefined;
      try {
        const { job, created, hash } = this.#admit(grant, item.data, authorize, earlier ? { ...looked[index]!, keyed: earlier } : looked[index]!);
        if (created) admittedNow.push(job);
        if (key && created) keyed.set(key, { entry: { id: job.id, requestHash: hash }, job, stale: null });
        return { status: created ? 202 : 200, id: job.id, jobStatus: job.status, created };
      } catch (error) {
        if (error instanceof MeshError && CAP_CODES.has(error.code)) {
          const entry = capped.get(error.code);
          capped.set(error.code, { error, jobs: (entry?.jobs ?? 0) + 1 });
        }
        if (error instanceof MeshError && error.status < 500) return { status: error.status, error: error.toJSON() };
        throw error;
      }
    });
    // One audit entry per cap a bulk request ran into (its first refusal's words), not one per job it refused.
    for (const { error, jobs } of capped.values()) this.#auditCap(grant, error, jobs);
    await this.#durable(admittedNow);
    return results;
  }

  /**
   * What admitting `body` needs from the store (Looked), and the verdicts of the pictures it names that the grant may
   * read (a picture it may not read is never decoded for it); null, at once, when it needs nothing (no key, no
   * picture). `carried`: pictures the request brings itself, not stored yet, which it may name.
   */
  #look(grant: VerifiedGrant, body: SubmitJobBody, carried: ReadonlySet<string> = NO_PICTURES): Promise<Looked> | null {
    const key = body.idempotencyKey;
    const pictures = picturesNamed(body.input);
    const referring = hasReference(body.input);
    if (!key && pictures.length === 0 && !referring) return null;
    return (async () => {
      const { store, states, clock } = this.#deps;
      let keyed: Looked['keyed'] = null;
      if (key) {
        const entry = await store.jobs.idempotencyEntry(grant.id, key, clock.now() - IDEMPOTENCY_WINDOW_MS);
        const job = entry ? await states.get(entry.id) : null;
        // A key older than the window is free again: the old job gives it up so the unique index allows the new one.
        const stale = entry ? null : await store.jobs.getJobByIdempotencyKey(grant.id, key, 0);
        keyed = { entry, job, stale };
      }
      const hidden = new Set<string>();
      for (const digest of pictures) {
        if (carried.has(digest)) continue;
        try {
          await this.#deps.blobs.assertVisible(grant, digest);
        } catch (error) {
          if (!(error instanceof MeshError && (error.code === 'NOT_FOUND' || error.code === 'BAD_DIGEST'))) throw error;
          hidden.add(digest);
        }
      }
      const sources = referring ? await this.#lookSources(grant, body.input) : undefined;
      const outputs = sources ? [...sources.values()].flatMap((source) => source.outputs.map((output) => output.digest)) : [];
      await this.#deps.pictures.prepare([...pictures.filter((digest) => !hidden.has(digest) && !carried.has(digest)), ...outputs]);
      return { keyed, hidden, sources };
    })();
  }

  /**
   * The jobs an input's references name, as the grant may see them (one it may not see is as if it did not exist),
   * with the outputs of those that succeeded. A malformed reference is left to `#vet`, which words its error.
   */
  async #lookSources(grant: VerifiedGrant, input: Record<string, unknown>): Promise<NonNullable<Looked['sources']>> {
    let references: InputReference[];
    try {
      references = referencesIn(input);
    } catch {
      return new Map();
    }
    const { states, store, clock } = this.#deps;
    const found = new Map<string, { job: JobRecord | null; outputs: { digest: string; mediaType: string }[] }>();
    for (const { fromJob } of references) {
      if (found.has(fromJob)) continue;
      const record = await states.get(fromJob);
      const job = record && canSee(grant, record, clock.now()) ? record : null;
      const outputs = job?.status === 'succeeded' ? await store.artifacts.artifactsOfJob(job.id) : [];
      found.set(fromJob, { job, outputs: outputs.map(({ digest, mediaType }) => ({ digest, mediaType })) });
    }
    return found;
  }

  /**
   * An input's references against the jobs they name: the input with each reference to a job that succeeded replaced
   * by its output's digest, and the references the job must wait for. A job the grant may not see is NOT_FOUND, one
   * that ended otherwise SOURCE_FAILED, an output that is not there or not a picture BAD_REFERENCE.
   */
  #resolve(input: Record<string, unknown>, looked: Looked): { input: Record<string, unknown>; pending: InputReference[]; resolved: Set<string> } {
    const references = referencesIn(input);
    const pending: InputReference[] = [];
    const resolved = new Set<string>();
    let substituted = input;
    for (const reference of references) {
      const source = looked.sources?.get(reference.fromJob);
      const field = `input.${reference.field}`;
      if (!source?.job) throw new MeshError('NOT_FOUND', { what: `Job ${reference.fromJob} (${field}.fromJob)` });
      const { job } = source;
      if (job.status === 'succeeded') {
        const picked = pickOutput(source.outputs, reference);
        if ('refusal' in picked) throw new MeshError('BAD_REFERENCE', { field, detail: picked.refusal });
        substituted = { ...substituted, [reference.field]: picked.digest };
        resolved.add(picked.digest);
      } else if (job.status === 'failed' || job.status === 'cancelled' || job.status === 'expired') {
        throw new MeshError('SOURCE_FAILED', {
          source: job.id, status: job.status, cause: job.errorCode ? ` (${job.errorCode}: ${job.errorMessage ?? ''})` : '', field,
        });
      } else pending.push(reference);
    }
    return { input: substituted, pending, resolved };
  }

  /**
   * Every check of one job's admission, in its order, taking and writing nothing (the queues' bounds and the rates
   * aside: `#admit` and `#vetAll` check those): what admitting it needs, or the job an idempotent repeat gets back.
   */
  #vet(grant: VerifiedGrant, body: SubmitJobBody, authorize: Authorize, looked: Looked): Vetted {
    const { config, registry, states, store } = this.#deps;
    // A store that cannot take writes now (PostgreSQL away) takes no new job: a 202 must be a promise kept.
    if (!store.isOpen()) {
      throw new MeshError('STORE_UNAVAILABLE', { store: store.location, detail: 'it does not answer', retryAfter: 2 }, { headers: { 'retry-after': '2' } });
    }
    const routing = config.routing[body.type];
    if (!routing) {
      throw new MeshError('UNKNOWN_JOB_TYPE', { type: body.type, known: Object.keys(config.routing).join(', ') });
    }
    const model = registry.resolve(body.type, body.model);
    const name = model.manifest.name;
    const priority = body.priority ?? config.priorities.default;
    if (priority > config.priorities.levels) {
      throw new MeshError('VALIDATION_FAILED', { detail: `priority ${priority} is beyond the lowest level, ${config.priorities.levels}` });
    }
    const album = body.album ?? defaultAlbumOf(grant);
    const named = namedCallback(body.webhook);
    // A grant's `webhook` caveat refuses any other URL a job names (GRANT_DENIED quoting it).
    authorize({ action: 'jobs:submit', jobType: body.type, model: name, classes: routing, album, ...(named === undefined ? {} : { webhook: named }) });
    if (grant.maxPriority !== null && priority < grant.maxPriority) {
      throw new MeshError('PRIORITY_DENIED', { ceiling: grant.maxPriority, priority });
    }
    const classes = grant.classes ? routing.filter((name) => grant.classes!.includes(name)) : routing;
    if (body.timeoutMs !== undefined && body.timeoutMs > model.policy.maxTimeoutMs) {
      throw new MeshError('TIMEOUT_TOO_LONG', { timeoutMs: body.timeoutMs, limit: model.policy.maxTimeoutMs, model: name });
    }
    const webhook = callbackFor(named, grant, this.#deps.webhooks && ((url) => this.#deps.webhooks!.check(url)));
    const { pictures } = this.#deps;
    let input: Record<string, unknown>;
    let pending: readonly InputReference[] = NO_REFERENCES;
    if (looked.sources) {
      // Another job's output as input: those that exist are digests now, the others stand in until their jobs succeed.
      const references = this.#resolve(body.input, looked);
      pending = references.pending;
      const sizeOf = (digest: string): { width: number; height: number } | null => (digest === REFERENCE_STAND_IN ? sourceSize(pending, looked) : pictures.sizeOf(digest));
      const normalized = model.jobInputs.normalize(withStandIns(references.input, pending), model.manifest, sizeOf);
      input = withReferences(normalized, pending);
      pictures.check(input, name, (digest) => {
        if (references.resolved.has(digest)) return;
        if (looked.hidden.has(digest) || !picturesNamed(body.input).includes(digest)) throw new MeshError('NOT_FOUND', { what: `Blob ${digest}` });
      });
    } else {
      input = model.jobInputs.normalize(body.input, model.manifest, (digest) => pictures.sizeOf(digest));
      pictures.check(input, name, (digest) => {
        if (looked.hidden.has(digest) || !picturesNamed(body.input).includes(digest)) throw new MeshError('NOT_FOUND', { what: `Blob ${digest}` });
      });
    }

    // Idempotency keys live per grant lineage (the grant id, shared by every narrowing). A key names one
    // request: the same request gets its job back (200); any other request with the key is refused with
    // 422 and learns nothing about the job — not its id, not its status. A request can match only if
    // everything it names (type, model, album) passed this grant's caveats above, so a narrowing that
    // may not submit a job never gets it back; and the key is never reused while the window holds it,
    // so the unique index cannot be asked for a second job under the same key.
    const hash = body.idempotencyKey
      ? requestHash({ type: body.type, model: name, priority, album, timeoutMs: body.timeoutMs ?? null, input: body.input })
      : null;
    const vetted = { model, priority, album, classes, input, hash, repeat: null, webhook, waitsFor: null, pending };
    if (body.idempotencyKey) {
      const existing = looked.keyed?.entry ?? null;
      // Jobs stored before request hashes were kept (null) are matched by key alone, as they were then.
      if (existing && existing.requestHash !== null && existing.requestHash !== hash) {
        throw new MeshError('IDEMPOTENCY_MISMATCH', { key: body.idempotencyKey });
      }
      const job = existing ? (states.active(existing.id) ?? looked.keyed?.job ?? null) : null;
      if (job) return { ...vetted, repeat: job };
    }
    this.#deps.classes?.admit(body.type, classes);
    this.#deps.workflows?.admit(model, input, classes);
    this.#deps.memory?.admit(model, input, classes);
    const waitsFor = this.#deps.hours?.(model, classes, grant.hosts, body.timeoutMs === undefined ? null : this.#deps.clock.now() + body.timeoutMs) ?? null;
    return { ...vetted, waitsFor };
  }

  /**
   * `waited`: as `submit` says. `id`: the job's, where the request named it already (a pipeline's step). `bodyJson`:
   * the request's body as its client sent it, where the HTTP layer kept it.
   */
  #admit(grant: VerifiedGrant, body: SubmitJobBody, authorize: Authorize, looked: Looked, { waited = false, id, bodyJson }: AdmitOptions = {}): { job: JobRecord; created: boolean; hash: string | null } {
    const { clock, config, scheduler, admission, states } = this.#deps;
    const { model, priority, album, classes, input, hash, repeat, webhook, waitsFor, pending } = this.#vet(grant, body, authorize, looked);
    if (repeat) return { job: repeat, created: false, hash };
    const name = model.manifest.name;
    // Bounds and caps first: a job they refuse must not use up the grant's rate.
    this.#counted(name, () => {
      admission.checkBounds(name, scheduler.depth(name), model.policy.maxQueueSize, scheduler.totalDepth, config.queues.maxTotal);
      this.#deps.caps?.check(grant.id, grant.caps, 1, (excess) => admission.retryAfter(name, excess));
      admission.takeRate(grant.rates);
    });
    const now = clock.now();
    const stale = looked.keyed?.stale ?? null;
    const waiting = pending.length > 0;
    const job = states.create({
      id: id ?? newId('j'), type: body.type, model: name, priority, album, classes, hosts: grant.hosts, input, inputJson: sentInput(bodyJson, body, input),
      grantId: grant.id, idempotencyKey: body.idempotencyKey ?? null, requestHash: hash, createdAt: now,
      deadlineAt: body.timeoutMs === undefined ? null : now + body.timeoutMs, ...(waiting ? { status: 'waiting' as const } : {}),
    // Written when it ends if its client waits for it, else after this turn, with its dispatch (JobStates.create) —
    // unless it names pictures: which jobs name a picture is recorded with the job (job_inputs), and a record of a job
    // never written would hold the picture's bytes for good. A job that waits for others is written at once: it must
    // be found after a restart, when its sources end.
    }, stale?.id, waiting || picturesNamed(input).length > 0 ? 'now' : waited ? 'end' : 'turn', waitsFor);
    this.#deps.pictures.recordJob(job.id, input);
    // Its caps are checked again when it is released into its queue (JobSources): the grant is not stored, so they are.
    if (waiting && (grant.caps.maxQueued || grant.caps.deviceSecondsPerDay)) this.#deps.commits.writeOne(() => this.#deps.store.jobs.recordCaps(job.id, grant.caps));
    if (webhook !== null) this.#deps.webhooks?.arm(job, webhook);
    this.#deps.cancellation.arm(job);
    if (waiting) this.#deps.sources.watch(job);
    else this.#deps.dispatcher.enqueue(job);
    return { job, created: true, hash };
  }

  /** Run `admit`; a cap refusal it throws is recorded in the audit log (`jobs`: how many jobs the request asked for). */
  #capsAudited<T>(grant: VerifiedGrant, admit: () => T, jobs = 1): T {
    try {
      return admit();
    } catch (error) {
      if (error instanceof MeshError && CAP_CODES.has(error.code)) this.#auditCap(grant, error, jobs);
      throw error;
    }
  }

  /**
   * A request refused for a cap of its grant's lineage, in the audit log beside the refusals for the grant itself:
   * the 429s the HTTP layer audits are only 401s and 403s, and a bulk submit's refusals are answers of a 207.
   */
  #auditCap(grant: VerifiedGrant, error: MeshError, jobs: number): void {
    this.#deps.audit?.record({
      event: 'request:refused', grantId: grant.id, actor: grant.id, status: error.status, code: error.code,
      detail: `${jobs === 1 ? '1 job' : `${jobs} jobs`} refused: ${error.message}`.slice(0, 500),
    });
  }

  /** Run an admission check of `model`'s; a 429 it throws is counted in the metrics by its reason. */
  #counted(model: string, check: () => void): void {
    try {
      check();
    } catch (error) {
      if (error instanceof MeshError && error.status === 429) {
        const reason = CAP_CODES.has(error.code) ? 'cap_reached' : error.code === 'RATE_LIMITED' ? 'rate_limited' : error.code === 'MESH_FULL' ? 'mesh_full' : 'queue_full';
        this.#deps.metrics.rejected(model, reason);
      }
      throw error;
    }
  }
}
