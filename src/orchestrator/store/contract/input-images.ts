/** What decoding a picture found: its format and size, or why it was refused. */
export type ImageVerdict =
  | { ok: true; format: string; width: number; height: number }
  | { ok: false; refusal: string };

/** The input_images and job_inputs tables: pictures jobs start from, their decoding verdicts, and which jobs name which. */
export interface InputImageTable {
  /** Record a verdict; the same bytes decode the same way, so the first one stands. */
  recordVerdict(digest: string, verdict: ImageVerdict, now: number): void;
  /** The job names this picture as an input (the host that runs it may then read it). */
  recordJobInput(digest: string, jobId: string): void;
  /** The verdict recorded for a digest, if it was ever decoded. */
  verdictOf(digest: string): Promise<ImageVerdict | undefined>;
  /** The picture's bytes left the store (reclaimed): its verdict goes with them, so admission finds no picture there. */
  forgetVerdict(digest: string): void;
  /** Whether a job now dispatched to or running on one of these hosts (any host: null) names the picture. */
  inputOfJobOn(digest: string, hosts: readonly string[] | null): Promise<boolean>;
}

export interface VerdictRow {
  format: string | null;
  width: number | null;
  height: number | null;
  refusal: string | null;
}

export const verdictFromRow = (row: VerdictRow): ImageVerdict =>
  (row.refusal !== null ? { ok: false, refusal: row.refusal } : { ok: true, format: row.format!, width: row.width!, height: row.height! });

/** The values of a verdict's INSERT (digest, format, width, height, refusal, checked_at). */
export const verdictValues = (digest: string, verdict: ImageVerdict, now: number): unknown[] => (verdict.ok
  ? [digest, verdict.format, verdict.width, verdict.height, null, now]
  : [digest, null, null, null, verdict.refusal, now]);

/** Whether any of the hosts the jobs that name a picture are placed on is one of `hosts` (null: any host). */
export const placedOn = (rows: readonly { host: string | null }[], hosts: readonly string[] | null): boolean =>
  rows.some((row) => row.host !== null && (hosts === null || hosts.includes(row.host)));
