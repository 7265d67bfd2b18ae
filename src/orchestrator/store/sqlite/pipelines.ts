import { pipelineFromRow, pipelineValues, type PipelineRecord, type PipelineRow, type PipelineTable } from '../contract/pipelines.js';
import { stmt, type Db } from './db.js';

export function insertPipeline(db: Db, pipeline: PipelineRecord): void {
  stmt(db, 'INSERT INTO pipelines (id, grant_id, created_at, steps) VALUES (?, ?, ?, ?)').run(...pipelineValues(pipeline));
}

export function getPipeline(db: Db, id: string): PipelineRecord | null {
  const row = stmt(db, 'SELECT id, grant_id, created_at, steps FROM pipelines WHERE id = ?').get(id) as PipelineRow | undefined;
  return row ? pipelineFromRow(row) : null;
}

/** The pipelines table on one connection. */
export function pipelineTable(db: Db): PipelineTable {
  return {
    insertPipeline: (pipeline) => insertPipeline(db, pipeline),
    getPipeline: async (id) => getPipeline(db, id),
  };
}
