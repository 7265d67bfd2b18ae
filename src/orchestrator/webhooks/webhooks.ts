import type { Logger } from 'pino';
import type { Clock, Timer } from '../../protocol/clock.js';
import { isTerminal } from '../../protocol/index.js';
import { backoffDelay } from '../../net/backoff.js';
import { HttpFailure, httpRequest, type HttpAnswer, type HttpRequest } from '../../net/http-client.js';
import type { Commits, DeliveryRecord, DeliveryTry, JobRecord, MeshStore } from '../store/index.js';
import { newId } from '../store/ids.js';
import { signWebhook } from './signing.js';
import type { WebhookTargets } from './targets.js';

/** mesh.yaml's `webhooks`, resolved: how deliveries are tried. */
export interface WebhookSettings {
  timeoutMs: number;
  maxResponseBytes: number;
  firstRetryMs: number;
  maxRetryMs: number;
  /** A delivery not answered 2xx this long after its event is given up. */
  giveUpAfterMs: number;
  concurrency: number;
  /** Ended deliveries are forgotten after this long. */
  retentionMs: number;
}

/** What an event is about: a job, or a chain of jobs (a pipeline, whose end calls `deliver` with its own summary). */
export type WebhookSubject = { kind: 'job' | 'pipeline'; id: string };

/**
 * One event to POST to one callback URL. `type` is Standard Webhooks' full-stop delimited event type,
 * `<subject kind>.<how it ended>` (`job.succeeded`, `job.failed`, `job.cancelled`, `job.expired`, `pipeline.succeeded`…);
 * `data` is the summary the body carries.
 */
export interface WebhookEvent {
  type: `${WebhookSubject['kind']}.${string}`;
  subject: WebhookSubject;
  /** In normal form, already allowed (`check`). */
  url: string;
  data: unknown;
  /** When it happened (epoch ms): the body's `timestamp`. */
  at: number;
}

export interface WebhooksDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  log: Logger;
  targets: WebhookTargets;
  /** The signing secret of a callback URL (`whsec_…`). */
  secretFor(url: string): string;
  settings: WebhookSettings;
  /** A job's summary: the job as `GET /v1/jobs/:id` shows it. */
  summarize(job: JobRecord): Promise<unknown>;
  /** The POST (the one outbound HTTP client; a test's stand-in). */
  send?: (url: string, request: HttpRequest) => Promise<HttpAnswer>;
  /** Sent as `user-agent`. */
  userAgent?: string;
}

/** A body larger than this leaves out the job's input and result (Standard Webhooks: keep payloads small; the API has the rest). */
const MAX_BODY_CHARS = 64 * 1024;
const PRUNE_EVERY_MS = 3_600_000;

/** How one try went, before it is written. */
type Outcome =
  | { delivered: true; status: number }
  | { delivered: false; status: number | null; error: string; final?: boolean; retryAfterMs?: number };

/**
 * Callbacks: a job admitted with a callback URL (its own or its grant's `webhook`) is armed — a row written in its
 * admission's commit — and when it ends its summary becomes a delivery: a row with a stable id (`webhook-id`) and
 * the body, fixed then, written in one write with the disarming. Each delivery is POSTed, signed (Standard Webhooks),
 * until a 2xx answers, retried with backoff until `giveUpAfterMs` after the event; every try is recorded (status,
 * attempts, last error, next try). At start, pending deliveries are tried again and armed jobs that ended without a
 * delivery get one, so each event reaches its receiver at least once, always with the same id.
 */
export class Webhooks {
  readonly #deps: WebhooksDeps;
  /** Unfinished jobs with a callback → its URL. */
  readonly #armed = new Map<string, string>();
  readonly #timers = new Map<string, Timer>();
  /** Deliveries due, waiting for a slot (at most `concurrency` tries at once). */
  readonly #due: DeliveryRecord[] = [];
  readonly #aborts = new Set<AbortController>();
  #inFlight = 0;
  #closed = false;
  #pruneTimer: Timer | null = null;

  constructor(deps: WebhooksDeps) {
    this.#deps = deps;
  }

  /** The URL in normal form if a callback may go there (the allowlist, an address host); WEBHOOK_NOT_ALLOWED otherwise. */
  check(url: string): string {
    return this.#deps.targets.check(url);
  }

  /** `check`, and the addresses its host name resolves to now (minting a grant that names it). */
  checkResolved(url: string): Promise<string> {
    return this.#deps.targets.checkResolved(url);
  }

  /** The signing secret of a callback URL in normal form. */
  secretFor(url: string): string {
    return this.#deps.secretFor(url);
  }

  /** A job admitted with a callback: armed in its admission's turn, so one commit records both. */
  arm(job: JobRecord, url: string): void {
    const { store, commits, clock } = this.#deps;
    this.#armed.set(job.id, url);
    commits.writeOne(() => store.webhooks.armJob(job.id, url, clock.now()));
  }

  /** A job reached its end (JobStates.onTerminal): its summary is delivered if it was armed. */
  jobEnded(job: JobRecord): void {
    const url = this.#armed.get(job.id);
    if (url === undefined) return;
    this.#armed.delete(job.id);
    void this.#deliverJob(job, url);
  }

  /**
   * Record an event for delivery and start trying it; returns its record (its `id` is the `webhook-id` of every try).
   * `disarm`: a write in the same commit — the arming of the job or pipeline this delivery replaces, removed — so a
   * restart finds either the arming or the delivery, never both nor neither.
   */
  deliver(event: WebhookEvent, disarm?: () => void): DeliveryRecord {
    const { store, commits, clock } = this.#deps;
    const record: DeliveryRecord = {
      id: newId('wh', clock), subjectKind: event.subject.kind, subjectId: event.subject.id, eventType: event.type, url: event.url,
      body: bodyOf(event), status: 'pending', attempts: 0, lastStatus: null, lastError: null, nextAt: clock.now(),
      createdAt: clock.now(), triedAt: null, finishedAt: null,
    };
    commits.write(() => {
      store.webhooks.insertDelivery(record);
      disarm?.();
    });
    this.#schedule(record);
    return record;
  }

  /** A subject's deliveries (a job's, a pipeline's), oldest first. */
  deliveriesOf(subjectId: string): Promise<DeliveryRecord[]> {
    return this.#deps.store.webhooks.deliveriesOf(subjectId);
  }

  /**
   * At start, before jobs are recovered: armed jobs are armed again — or, if they ended while no delivery was recorded
   * (the orchestrator stopped in between), delivered now — and pending deliveries are tried again when due.
   */
  async start(jobs: { get(id: string): Promise<JobRecord | null> }): Promise<{ armed: number; pending: number; recovered: number }> {
    const { store, commits } = this.#deps;
    let recovered = 0;
    const armed = await store.webhooks.armedJobs();
    for (const { jobId, url } of armed) {
      const job = await jobs.get(jobId);
      if (!job) commits.writeOne(() => store.webhooks.disarmJob(jobId));
      else if (isTerminal(job.status)) {
        recovered++;
        void this.#deliverJob(job, url);
      } else this.#armed.set(jobId, url);
    }
    const pending = await store.webhooks.pendingDeliveries();
    for (const record of pending) this.#schedule(record);
    this.#prune();
    return { armed: armed.length - recovered, pending: pending.length, recovered };
  }

  /** Stop trying: what is pending stays pending in the store, and is tried again after the next start. */
  close(): void {
    this.#closed = true;
    for (const timer of this.#timers.values()) timer.cancel();
    this.#timers.clear();
    this.#due.length = 0;
    this.#pruneTimer?.cancel();
    for (const abort of this.#aborts) abort.abort(new Error('the orchestrator is stopping'));
  }

  async #deliverJob(job: JobRecord, url: string): Promise<void> {
    let data: unknown;
    try {
      data = await this.#deps.summarize(job);
    } catch (error) {
      // The event matters more than its detail: the receiver can read the job from the API.
      this.#deps.log.warn({ err: error, job: job.id }, 'could not summarize a job for its callback; sending its id and status');
      data = { id: job.id, status: job.status };
    }
    if (this.#closed) return; // still armed in the store: delivered after the next start
    const { store } = this.#deps;
    this.deliver({ type: `job.${job.status}`, subject: { kind: 'job', id: job.id }, url, data, at: job.finishedAt ?? this.#deps.clock.now() }, () => store.webhooks.disarmJob(job.id));
  }

  #schedule(record: DeliveryRecord): void {
    if (this.#closed) return;
    const wait = Math.max(0, (record.nextAt ?? 0) - this.#deps.clock.now());
    if (wait === 0) {
      this.#enqueue(record);
      return;
    }
    this.#timers.set(record.id, this.#deps.clock.setTimer(wait, () => {
      this.#timers.delete(record.id);
      this.#enqueue(record);
    }));
  }

  #enqueue(record: DeliveryRecord): void {
    if (this.#closed) return;
    this.#due.push(record);
    this.#pump();
  }

  #pump(): void {
    while (!this.#closed && this.#inFlight < this.#deps.settings.concurrency && this.#due.length > 0) {
      const record = this.#due.shift()!;
      this.#inFlight++;
      void this.#try(record).finally(() => {
        this.#inFlight--;
        this.#pump();
      });
    }
  }

  async #try(record: DeliveryRecord): Promise<void> {
    const { clock, settings, store, commits, log } = this.#deps;
    const outcome = await this.#post(record);
    if (this.#closed) return; // a try cut short by the stop is not one: it is made again after the next start
    const now = clock.now();
    const attempts = record.attempts + 1;
    let update: DeliveryTry;
    if (outcome.delivered) {
      update = { status: 'delivered', attempts, lastStatus: outcome.status, lastError: null, nextAt: null, triedAt: now, finishedAt: now };
    } else {
      const backoff = backoffDelay({ initialMs: settings.firstRetryMs, maxMs: settings.maxRetryMs, jitter: true }, attempts);
      const wait = Math.min(settings.maxRetryMs, Math.max(backoff, outcome.retryAfterMs ?? 0));
      const giveUpAt = record.createdAt + settings.giveUpAfterMs;
      if (outcome.final || now + wait > giveUpAt) {
        const why = outcome.final ? outcome.error : `gave up after ${attempts} tries in ${Math.round((now - record.createdAt) / 1000)} s (webhooks.giveUpAfterS); the last: ${outcome.error}`;
        update = { status: 'failed', attempts, lastStatus: outcome.status, lastError: why.slice(0, 1000), nextAt: null, triedAt: now, finishedAt: now };
        log.warn({ delivery: record.id, subject: record.subjectId, url: redactedUrl(record.url), attempts, error: why }, 'a callback was given up');
      } else {
        update = { status: 'pending', attempts, lastStatus: outcome.status, lastError: outcome.error.slice(0, 1000), nextAt: now + wait, triedAt: now, finishedAt: null };
      }
    }
    Object.assign(record, update);
    commits.writeOne(() => store.webhooks.updateDelivery(record.id, update));
    if (record.status === 'pending') this.#schedule(record);
  }

  async #post(record: DeliveryRecord): Promise<Outcome> {
    const { targets, settings, clock } = this.#deps;
    try {
      targets.check(record.url);
    } catch (error) {
      // The allowlist changed since the event: an admin's decision, so it is not retried.
      return { delivered: false, status: null, error: (error as Error).message, final: true };
    }
    const timestamp = Math.floor(clock.now() / 1000);
    const abort = new AbortController();
    this.#aborts.add(abort);
    try {
      const answer = await (this.#deps.send ?? httpRequest)(record.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'webhook-id': record.id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': signWebhook(this.#deps.secretFor(record.url), record.id, timestamp, record.body),
          ...(this.#deps.userAgent ? { 'user-agent': this.#deps.userAgent } : {}),
        },
        body: record.body,
        // A connection of its own each time: nothing pooled outlives the address check its lookup made.
        agent: false,
        lookup: targets.lookup,
        timeoutMs: settings.timeoutMs,
        connectTimeoutMs: Math.min(settings.timeoutMs, 10_000),
        maxBytes: settings.maxResponseBytes,
        idempotent: false,
        signal: abort.signal,
      });
      if (answer.status >= 200 && answer.status < 300) return { delivered: true, status: answer.status };
      const said = answer.text.slice(0, 200).replace(/\s+/g, ' ').trim();
      const error = `answered ${answer.status}${said ? `: ${said}` : ''}`;
      // 410: the receiver wants no more (Standard Webhooks); a redirect is not followed (the allowlist is for the URL named).
      if (answer.status === 410) return { delivered: false, status: 410, error: `${error} (410 Gone: not retried)`, final: true };
      return { delivered: false, status: answer.status, error, retryAfterMs: retryAfterMs(answer.headers['retry-after'], clock.now()) };
    } catch (error) {
      // A 2xx whose body runs past the cap was still an answer: it counts, what it said is not read.
      if (error instanceof HttpFailure && error.kind === 'too-large' && error.status !== null && error.status >= 200 && error.status < 300) {
        return { delivered: true, status: error.status };
      }
      const status = error instanceof HttpFailure ? error.status : null;
      const kind = error instanceof HttpFailure ? `${error.kind}: ` : '';
      return { delivered: false, status: status === 0 ? null : status, error: `${kind}${(error as Error).message}` };
    } finally {
      this.#aborts.delete(abort);
    }
  }

  #prune(): void {
    if (this.#closed) return;
    const { store, commits, clock, settings } = this.#deps;
    commits.writeOne(() => store.webhooks.pruneDeliveries(clock.now() - settings.retentionMs));
    this.#pruneTimer = clock.setTimer(PRUNE_EVERY_MS, () => this.#prune());
  }
}

/** The JSON body of an event (Standard Webhooks' payload: type, timestamp, data). */
function bodyOf(event: WebhookEvent): string {
  const body = JSON.stringify({ type: event.type, timestamp: new Date(event.at).toISOString(), data: event.data });
  if (body.length <= MAX_BODY_CHARS || event.data === null || typeof event.data !== 'object') return body;
  const { input: _input, result: _result, ...rest } = event.data as Record<string, unknown>;
  return JSON.stringify({ type: event.type, timestamp: new Date(event.at).toISOString(), data: { ...rest, truncated: true } });
}

/** A Retry-After (seconds, or an HTTP date) in ms from now; undefined when absent or unreadable. */
function retryAfterMs(header: string | string[] | undefined, now: number): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - now) : undefined;
}

/** A callback URL without its query (which may carry the receiver's own token): for logs and for readers of a job. */
export function redactedUrl(url: string): string {
  const parsed = new URL(url);
  return `${parsed.origin}${parsed.pathname}${parsed.search ? '?…' : ''}`;
}
