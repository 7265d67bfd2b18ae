/** A pipeline as stored: its steps, each the job admitted for it, in the order they were given. */
export interface PipelineRecord {
  id: string;
  /** The grant lineage that submitted it (the grant id its jobs keep). */
  grantId: string;
  createdAt: number;
  steps: { id: string; jobId: string }[];
}

/**
 * The pipelines and pipeline_jobs tables: one row per pipeline, naming its steps' jobs (the jobs are rows of `jobs`
 * like any other, so their states, attempts and results need nothing here), and one per step's job naming its
 * pipeline, which lets retention find a job's pipeline by the job. Written in the turn its jobs are admitted.
 */
export interface PipelineTable {
  insertPipeline(pipeline: PipelineRecord): void;
  getPipeline(id: string): Promise<PipelineRecord | null>;
  /**
   * These jobs were deleted (retention): they leave their pipelines, and a pipeline left with no job goes too, with
   * its callback's arming (pipeline_webhooks). One write, whatever the store.
   */
  forgetJobs(jobIds: readonly string[]): void;
}

export interface PipelineRow {
  id: string;
  grant_id: string;
  created_at: number;
  steps: string;
}

export const pipelineFromRow = (row: PipelineRow): PipelineRecord => ({
  id: row.id, grantId: row.grant_id, createdAt: Number(row.created_at), steps: JSON.parse(row.steps) as PipelineRecord['steps'],
});

/** The values of a pipeline's INSERT (id, grant_id, created_at, steps). */
export const pipelineValues = (pipeline: PipelineRecord): unknown[] => [pipeline.id, pipeline.grantId, pipeline.createdAt, JSON.stringify(pipeline.steps)];
