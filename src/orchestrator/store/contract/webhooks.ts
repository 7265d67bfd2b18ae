/**
 * The job_webhooks, pipeline_webhooks and webhook_deliveries tables: which unfinished jobs and pipelines call back
 * when they end (armed at admission, in its own commit), and every event on its way to a callback URL with how its
 * delivery went. A job's (or pipeline's) arming goes in the same write that records its delivery, so one still there
 * at start is one whose end was not yet turned into a delivery (the orchestrator stopped in between): it is delivered
 * then, if it has ended.
 */

/** Where an event's delivery stands: being tried (`pending`), answered 2xx (`delivered`), or given up (`failed`). */
export type DeliveryStatus = 'pending' | 'delivered' | 'failed';

/** One event for one callback URL: the same id and body on every try (receivers de-duplicate by the id). */
export interface DeliveryRecord {
  /** `wh_…`, sent as `webhook-id`. */
  id: string;
  /** What the event is about: a job, or a pipeline. */
  subjectKind: string;
  subjectId: string;
  /** `job.succeeded`, `job.failed`, … (the body's `type`). */
  eventType: string;
  url: string;
  /** The JSON sent, fixed when the event happened. */
  body: string;
  status: DeliveryStatus;
  attempts: number;
  /** The status of the last answer (null: none yet, or no answer). */
  lastStatus: number | null;
  /** Why the last try failed (null: it did not, or none yet). */
  lastError: string | null;
  /** When the next try is due (pending only). */
  nextAt: number | null;
  createdAt: number;
  /** When it was last tried. */
  triedAt: number | null;
  /** When it was delivered or given up. */
  finishedAt: number | null;
}

/** How one try went: what the delivery's row records. */
export interface DeliveryTry {
  status: DeliveryStatus;
  attempts: number;
  lastStatus: number | null;
  lastError: string | null;
  nextAt: number | null;
  triedAt: number;
  finishedAt: number | null;
}

export interface WebhookTable {
  /** The job calls `url` back when it ends (written in the job's admission). */
  armJob(jobId: string, url: string, now: number): void;
  /** The job's callback is now a delivery, or will never be one (the job is gone). */
  disarmJob(jobId: string): void;
  /** Jobs whose callback is armed: unfinished, or ended with their delivery not yet recorded. */
  armedJobs(): Promise<{ jobId: string; url: string }[]>;
  /** The pipeline calls `url` back when its last step ends (written with the pipeline's row). */
  armPipeline(pipelineId: string, url: string, now: number): void;
  disarmPipeline(pipelineId: string): void;
  /** Pipelines whose callback is armed, oldest first: unfinished, or ended with their delivery not yet recorded. */
  armedPipelines(): Promise<{ pipelineId: string; url: string }[]>;
  insertDelivery(record: DeliveryRecord): void;
  /** Record a try. */
  updateDelivery(id: string, outcome: DeliveryTry): void;
  /** Deliveries still being tried, oldest first. */
  pendingDeliveries(): Promise<DeliveryRecord[]>;
  /** A subject's deliveries, oldest first. */
  deliveriesOf(subjectId: string): Promise<DeliveryRecord[]>;
  /** Forget deliveries that ended (delivered or given up) before `before`. */
  pruneDeliveries(before: number): void;
}

export interface DeliveryRow {
  id: string;
  subject_kind: string;
  subject_id: string;
  event_type: string;
  url: string;
  body: string;
  status: string;
  attempts: number | string;
  last_status: number | string | null;
  last_error: string | null;
  next_at: number | string | null;
  created_at: number | string;
  tried_at: number | string | null;
  finished_at: number | string | null;
}

const num = (value: number | string | null): number | null => (value === null ? null : Number(value));

export const deliveryFromRow = (row: DeliveryRow): DeliveryRecord => ({
  id: row.id, subjectKind: row.subject_kind, subjectId: row.subject_id, eventType: row.event_type, url: row.url, body: row.body,
  status: row.status as DeliveryStatus, attempts: Number(row.attempts), lastStatus: num(row.last_status), lastError: row.last_error,
  nextAt: num(row.next_at), createdAt: Number(row.created_at), triedAt: num(row.tried_at), finishedAt: num(row.finished_at),
});

/** The columns of a delivery, in the order `deliveryValues` gives them. */
export const DELIVERY_COLUMNS = 'id, subject_kind, subject_id, event_type, url, body, status, attempts, last_status, last_error, next_at, created_at, tried_at, finished_at';

export const deliveryValues = (record: DeliveryRecord): unknown[] => [
  record.id, record.subjectKind, record.subjectId, record.eventType, record.url, record.body, record.status, record.attempts,
  record.lastStatus, record.lastError, record.nextAt, record.createdAt, record.triedAt, record.finishedAt,
];

/** The values of a try's UPDATE: status, attempts, last_status, last_error, next_at, tried_at, finished_at, then the id. */
export const tryValues = (id: string, outcome: DeliveryTry): unknown[] => [
  outcome.status, outcome.attempts, outcome.lastStatus, outcome.lastError, outcome.nextAt, outcome.triedAt, outcome.finishedAt, id,
];
