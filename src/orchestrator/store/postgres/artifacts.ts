import { artifactFromRow, artifactValues, containing, emptyScope, type ArtifactRow, type ArtifactTable } from '../contract/artifacts.js';
import { marks, Where, type PgAccess } from './access.js';
import { PROMPT_SQL } from './jobs.js';

/** Artifact columns with the job's prompt. */
const ARTIFACTS = `SELECT a.*, ${PROMPT_SQL} AS prompt FROM artifacts a JOIN jobs j ON j.id = a.job_id`;

/** The artifacts table in PostgreSQL. */
export function artifactTable({ write, read }: PgAccess): ArtifactTable {
  return {
    insertArtifact: (artifact) => write(`INSERT INTO artifacts (digest, job_id, type, model, host, album, media_type, bytes, width, height,
        compute_ms, total_ms, created_at, energy_j) VALUES (${marks(14)}) ON CONFLICT DO NOTHING`, artifactValues(artifact)),
    deleteArtifactsOfJob: (jobId) => write('DELETE FROM artifacts WHERE job_id = $1', [jobId]),
    artifactsOfJob: async (jobId) => (await read<ArtifactRow>(`${ARTIFACTS} WHERE a.job_id = $1 ORDER BY a.seq`, [jobId])).map(artifactFromRow),
    listArtifacts: async (filter) => {
      const where = new Where();
      where.in('a.type', filter.types);
      if (filter.models) where.models('a.model', filter.models);
      where.in('a.album', filter.albums);
      // SQLite's LIKE ignores the case of ASCII letters; ILIKE does too (and of every other letter).
      if (filter.prompt) where.add(`${PROMPT_SQL} ILIKE ? ESCAPE '\\'`, containing(filter.prompt));
      if (filter.beforeSeq !== undefined) where.add('a.seq < ?', filter.beforeSeq);
      return (await read<ArtifactRow>(`${ARTIFACTS} ${where.sql()} ORDER BY a.seq DESC LIMIT ${where.next()}`, [...where.values, filter.limit])).map(artifactFromRow);
    },
    digestPublishedIn: async (digest, scope) => {
      if (emptyScope(scope)) return false;
      const where = new Where();
      where.add('digest = ?', digest);
      where.in('album', scope.albums);
      where.in('type', scope.types);
      if (scope.models) where.models('model', scope.models);
      return (await read(`SELECT 1 FROM artifacts ${where.sql()} LIMIT 1`, where.values)).length > 0;
    },
    albumsWithArtifacts: async () => (await read<{ album: string }>('SELECT DISTINCT album FROM artifacts ORDER BY album')).map((row) => row.album),
    digestPublished: async (digest) => (await read('SELECT 1 FROM artifacts WHERE digest = $1 LIMIT 1', [digest])).length > 0,
  };
}
