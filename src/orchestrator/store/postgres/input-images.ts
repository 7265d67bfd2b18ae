import { placedOn, verdictFromRow, verdictValues, type InputImageTable, type VerdictRow } from '../contract/input-images.js';
import type { PgAccess } from './access.js';

/** The input_images and job_inputs tables in PostgreSQL. */
export function inputImageTable({ write, read }: PgAccess): InputImageTable {
  return {
    recordVerdict: (digest, verdict, now) => write(
      'INSERT INTO input_images (digest, format, width, height, refusal, checked_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING',
      verdictValues(digest, verdict, now),
    ),
    recordJobInput: (digest, jobId) => write('INSERT INTO job_inputs (digest, job_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [digest, jobId]),
    forgetVerdict: (digest) => write('DELETE FROM input_images WHERE digest = $1', [digest]),
    verdictOf: async (digest) => (await read<VerdictRow>('SELECT format, width, height, refusal FROM input_images WHERE digest = $1', [digest])).map(verdictFromRow)[0],
    inputOfJobOn: async (digest, hosts) => placedOn(await read<{ host: string | null }>(`SELECT j.lease_host AS host FROM job_inputs i JOIN jobs j ON j.id = i.job_id
      WHERE i.digest = $1 AND j.status IN ('dispatched', 'running')`, [digest]), hosts),
  };
}
