import { stmt, type Db } from './db.js';
import { modelIn } from './model-filter.js';
import { PROMPT_SQL } from './jobs.js';

export interface ArtifactRecord {
  seq: number;
  digest: string;
  jobId: string;
  type: string;
  model: string;
  host: string;
  album: string;
  /** The job's prompt, read from the job (artifacts do not store it). */
  prompt: string | null;
  mediaType: string;
  bytes: number;
  width: number | null;
  height: number | null;
  computeMs: number | null;
  totalMs: number | null;
  createdAt: number;
}

export interface ArtifactRow {
  seq: number; digest: string; job_id: string; type: string; model: string; host: string; album: string; prompt: string | null;
  media_type: string; bytes: number; width: number | null; height: number | null; compute_ms: number | null; total_ms: number | null;
  created_at: number;
}

export function artifactFromRow(row: ArtifactRow): ArtifactRecord {
  return {
    seq: row.seq, digest: row.digest, jobId: row.job_id, type: row.type, model: row.model, host: row.host, album: row.album,
    prompt: row.prompt, mediaType: row.media_type, bytes: row.bytes, width: row.width, height: row.height,
    computeMs: row.compute_ms, totalMs: row.total_ms, createdAt: row.created_at,
  };
}

export function insertArtifact(db: Db, artifact: Omit<ArtifactRecord, 'seq' | 'prompt'>): void {
  stmt(db, `INSERT OR IGNORE INTO artifacts (digest, job_id, type, model, host, album, media_type, bytes, width, height,
    compute_ms, total_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(
    artifact.digest, artifact.jobId, artifact.type, artifact.model, artifact.host, artifact.album,
    artifact.mediaType, artifact.bytes, artifact.width, artifact.height, artifact.computeMs, artifact.totalMs, artifact.createdAt,
  );
}

/** Artifact columns with the job's prompt. */
const SELECT = `SELECT a.*, ${PROMPT_SQL} AS prompt FROM artifacts a JOIN jobs j ON j.id = a.job_id`;

export function artifactsOfJob(db: Db, jobId: string): ArtifactRecord[] {
  return (stmt(db, `${SELECT} WHERE a.job_id = ? ORDER BY a.seq`).all(jobId) as ArtifactRow[]).map(artifactFromRow);
}

export interface ArtifactFilter {
  types?: readonly string[] | null;
  models?: readonly string[] | null;
  albums?: readonly string[] | null;
  /** Only results whose job's prompt holds this text (case-insensitive for ASCII, as SQLite's LIKE). */
  prompt?: string;
  beforeSeq?: number;
  limit: number;
}

/** `text` as a LIKE pattern that matches it anywhere, its own % and _ taken literally. */
const containing = (text: string): string => `%${text.replace(/[\\%_]/g, (char) => `\\${char}`)}%`;

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
export function digestPublishedIn(db: Db, digest: string, scope: { albums: readonly string[] | null; types: readonly string[] | null; models: readonly string[] | null }): boolean {
  if (scope.albums?.length === 0 || scope.types?.length === 0 || scope.models?.length === 0) return false;
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
