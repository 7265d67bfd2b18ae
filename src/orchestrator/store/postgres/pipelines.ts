import { pipelineFromRow, pipelineValues, type PipelineRow, type PipelineTable } from '../contract/pipelines.js';
import type { PgAccess } from './access.js';

/** The pipelines table in PostgreSQL. */
export function pipelineTable({ write, read }: PgAccess): PipelineTable {
  return {
    insertPipeline: (pipeline) => write('INSERT INTO pipelines (id, grant_id, created_at, steps) VALUES ($1, $2, $3, $4)', pipelineValues(pipeline)),
    getPipeline: async (id) => (await read<PipelineRow>('SELECT id, grant_id, created_at, steps FROM pipelines WHERE id = $1', [id])).map(pipelineFromRow)[0] ?? null,
  };
}
