import {
  artifactFromRow, artifactValues, containing, emptyScope, type ArtifactFilter, type ArtifactRecord, type ArtifactRow, type ArtifactScope, type ArtifactTable,
} from '../contract/artifacts.js';
import { stmt, type Db } from './db.js';
import { modelIn } from './model-filter.js';
import { PROMPT_SQL } from './jobs.js';

export function insertArtifact(db: Db, artifact: Omit<ArtifactRecord, 'seq' | 'prompt'>): void {
  stmt(db, `INSERT OR IGNORE INTO artifacts (digest, job_id, type, model, host, album, media_type, bytes, width, height,
    compute_ms, total_ms, created_at, energy_j) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(...artifactValues(artifact));
}

/** Artifact columns with the job's prompt. */
const SELECT = `SELECT a.*, ${PROMPT_SQL} AS prompt FROM artifacts a JOIN jobs j ON j.id = a.job_id`;

export function artifactsOfJob(db: Db, jobId: string): ArtifactRecord[] {
  return (stmt(db, `${SELECT} WHERE a.job_id = ? ORDER BY a.seq`).all(jobId) as ArtifactRow[]).map(artifactFromRow);
}

/** Artifacts newest first; `null` lists mean "no restriction". */
export function listArtifacts(db: Db, filter: ArtifactFilter): ArtifactRecord[] {
  const where: string[] = [];
  const args: unknown[] = [];
  for (const [column, values] of [['a.type', filter.types], ['a.model', filter.models], ['a.album', filter.albums]] as const) {
    if (!values) continue;
    if (values.length === 0) where.push('0');
    else if (column === 'a.model') {
      const models = modelIn(column, values);
      where.push(models.sql);
      args.push(...models.args);
    } else { where.push(`${column} IN (${values.map(() => '?').join(', ')})`); args.push(...values); }
  }
  if (filter.prompt) { where.push(`${PROMPT_SQL} LIKE ? ESCAPE '\\'`); args.push(containing(filter.prompt)); }
  if (filter.beforeSeq !== undefined) { where.push('a.seq < ?'); args.push(filter.beforeSeq); }
  const sql = `${SELECT} ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY a.seq DESC LIMIT ?`;
  return (db.prepare(sql).all(...args, filter.limit) as ArtifactRow[]).map(artifactFromRow);
}

/** Whether some artifact with this digest lies in one of `albums` (and, when given, has one of `types` and `models`). */
export function digestPublishedIn(db: Db, digest: string, scope: ArtifactScope): boolean {
  if (emptyScope(scope)) return false;
  const where = ['digest = ?'];
  const args: unknown[] = [digest];
  if (scope.albums) { where.push(`album IN (${scope.albums.map(() => '?').join(', ')})`); args.push(...scope.albums); }
  if (scope.types) { where.push(`type IN (${scope.types.map(() => '?').join(', ')})`); args.push(...scope.types); }
  if (scope.models) {
    const models = modelIn('model', scope.models);
    where.push(models.sql);
    args.push(...models.args);
  }
  // One statement per shape of scope (a handful per mesh), prepared once: galleries ask this for every picture.
  return stmt(db, `SELECT 1 FROM artifacts WHERE ${where.join(' AND ')} LIMIT 1`).get(...args) !== undefined;
}

/** The albums that hold any result, by name (from the album index alone). */
export function albumsWithArtifacts(db: Db): string[] {
  return (stmt(db, 'SELECT DISTINCT album FROM artifacts ORDER BY album').all() as { album: string }[]).map((row) => row.album);
}

/** Forget a job's published results; returns the digests they named. The blobs stay in the store (see GalleryService.remove). */
export function deleteArtifactsOfJob(db: Db, jobId: string): string[] {
  return (stmt(db, 'DELETE FROM artifacts WHERE job_id = ? RETURNING digest').all(jobId) as { digest: string }[]).map((row) => row.digest);
}

/** Whether any published result still names this digest. */
export function digestPublished(db: Db, digest: string): boolean {
  return stmt(db, 'SELECT 1 FROM artifacts WHERE digest = ? LIMIT 1').get(digest) !== undefined;
}

/** The artifacts table on one connection. */
export function artifactTable(db: Db): ArtifactTable {
  return {
    insertArtifact: (artifact) => insertArtifact(db, artifact),
    deleteArtifactsOfJob: (jobId) => void deleteArtifactsOfJob(db, jobId),
    artifactsOfJob: async (jobId) => artifactsOfJob(db, jobId),
    listArtifacts: async (filter) => listArtifacts(db, filter),
    digestPublishedIn: async (digest, scope) => digestPublishedIn(db, digest, scope),
    albumsWithArtifacts: async () => albumsWithArtifacts(db),
    digestPublished: async (digest) => digestPublished(db, digest),
  };
}
