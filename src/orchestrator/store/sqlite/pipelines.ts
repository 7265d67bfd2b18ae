import { pipelineFromRow, pipelineValues, type PipelineRecord, type PipelineRow, type PipelineTable } from '../contract/pipelines.js';
import { stmt, type Db } from './db.js';

export function insertPipeline(db: Db, pipeline: PipelineRecord): void {
  stmt(db, 'INSERT INTO pipelines (id, grant_id, created_at, steps) VALUES (?, ?, ?, ?)').run(...pipelineValues(pipeline));
  const step = stmt(db, 'INSERT INTO pipeline_jobs (job_id, pipeline_id) VALUES (?, ?)');
  for (const { jobId } of pipeline.steps) step.run(jobId, pipeline.id);
}

export function getPipeline(db: Db, id: string): PipelineRecord | null {
  const row = stmt(db, 'SELECT id, grant_id, created_at, steps FROM pipelines WHERE id = ?').get(id) as PipelineRow | undefined;
  return row ? pipelineFromRow(row) : null;
}

/** See PipelineTable.forgetJobs. */
export function forgetJobs(db: Db, jobIds: readonly string[]): void {
  const pipelineOf = stmt(db, 'SELECT pipeline_id FROM pipeline_jobs WHERE job_id = ?');
  const leave = stmt(db, 'DELETE FROM pipeline_jobs WHERE job_id = ?');
  const touched = new Set<string>();
  for (const id of jobIds) {
    const row = pipelineOf.get(id) as { pipeline_id: string } | undefined;
    if (!row) continue;
    touched.add(row.pipeline_id);
    leave.run(id);
  }
  const left = stmt(db, 'SELECT 1 FROM pipeline_jobs WHERE pipeline_id = ? LIMIT 1');
  const statements = ['DELETE FROM pipeline_webhooks WHERE pipeline_id = ?', 'DELETE FROM pipelines WHERE id = ?'].map((text) => stmt(db, text));
  for (const pipeline of touched) {
    if (left.get(pipeline) === undefined) for (const statement of statements) statement.run(pipeline);
  }
}

/** The pipelines table on one connection. */
export function pipelineTable(db: Db): PipelineTable {
  return {
    insertPipeline: (pipeline) => insertPipeline(db, pipeline),
    getPipeline: async (id) => getPipeline(db, id),
    forgetJobs: (jobIds) => forgetJobs(db, jobIds),
  };
}
