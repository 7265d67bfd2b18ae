import { pipelineFromRow, pipelineValues, type PipelineRow, type PipelineTable } from '../contract/pipelines.js';
import type { PgAccess } from './access.js';

/** The pipelines table in PostgreSQL. */
export function pipelineTable({ write, read }: PgAccess): PipelineTable {
  return {
    insertPipeline: (pipeline) => {
      write('INSERT INTO pipelines (id, grant_id, created_at, steps) VALUES ($1, $2, $3, $4)', pipelineValues(pipeline));
      write('INSERT INTO pipeline_jobs (job_id, pipeline_id) SELECT job_id, $2 FROM unnest($1::text[]) AS job_id', [pipeline.steps.map((step) => step.jobId), pipeline.id]);
    },
    getPipeline: async (id) => (await read<PipelineRow>('SELECT id, grant_id, created_at, steps FROM pipelines WHERE id = $1', [id])).map(pipelineFromRow)[0] ?? null,
    forgetJobs: (jobIds) => {
      if (jobIds.length === 0) return;
      // Written behind (no answer to read between statements), so one statement: the CTEs see the rows as they were
      // before it, hence a pipeline is emptied when no job of it outside `jobIds` remains.
      write(`WITH gone AS (DELETE FROM pipeline_jobs WHERE job_id = ANY($1) RETURNING pipeline_id),
        emptied AS (SELECT DISTINCT gone.pipeline_id FROM gone WHERE NOT EXISTS (
          SELECT 1 FROM pipeline_jobs WHERE pipeline_jobs.pipeline_id = gone.pipeline_id AND NOT (pipeline_jobs.job_id = ANY($1)))),
        unarmed AS (DELETE FROM pipeline_webhooks WHERE pipeline_id IN (SELECT pipeline_id FROM emptied))
        DELETE FROM pipelines WHERE id IN (SELECT pipeline_id FROM emptied)`, [[...jobIds]]);
    },
  };
}
