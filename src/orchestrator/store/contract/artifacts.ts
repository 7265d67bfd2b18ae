/** A published result: a job's output, in an album; times are epoch milliseconds. */
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
  /** The energy its job took (J): its share of its batch's, from the GPU's power as its driver said; null where none. */
  energyJ: number | null;
  createdAt: number;
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

/** Where a grant may see results: `null` lists mean "no restriction", empty ones "nothing". */
export interface ArtifactScope {
  albums: readonly string[] | null;
  types: readonly string[] | null;
  models: readonly string[] | null;
}

/** The artifacts table: results published, listed (the gallery, /v1/artifacts) and deleted. */
export interface ArtifactTable {
  insertArtifact(artifact: Omit<ArtifactRecord, 'seq' | 'prompt'>): void;
  deleteArtifactsOfJob(jobId: string): void;
  artifactsOfJob(jobId: string): Promise<ArtifactRecord[]>;
  listArtifacts(filter: ArtifactFilter): Promise<ArtifactRecord[]>;
  /** Whether some artifact with this digest lies in the scope. */
  digestPublishedIn(digest: string, scope: ArtifactScope): Promise<boolean>;
  albumsWithArtifacts(): Promise<string[]>;
  digestPublished(digest: string): Promise<boolean>;
}

export interface ArtifactRow {
  seq: number; digest: string; job_id: string; type: string; model: string; host: string; album: string; prompt: string | null;
  media_type: string; bytes: number; width: number | null; height: number | null; compute_ms: number | null; total_ms: number | null;
  energy_j: number | null; created_at: number;
}

export function artifactFromRow(row: ArtifactRow): ArtifactRecord {
  return {
    seq: row.seq, digest: row.digest, jobId: row.job_id, type: row.type, model: row.model, host: row.host, album: row.album,
    prompt: row.prompt, mediaType: row.media_type, bytes: row.bytes, width: row.width, height: row.height,
    computeMs: row.compute_ms, totalMs: row.total_ms, energyJ: row.energy_j, createdAt: row.created_at,
  };
}

/** The values of an artifact's INSERT, in the column order both stores write them. */
export function artifactValues(artifact: Omit<ArtifactRecord, 'seq' | 'prompt'>): unknown[] {
  return [
    artifact.digest, artifact.jobId, artifact.type, artifact.model, artifact.host, artifact.album,
    artifact.mediaType, artifact.bytes, artifact.width, artifact.height, artifact.computeMs, artifact.totalMs, artifact.createdAt, artifact.energyJ,
  ];
}

/** `text` as a LIKE pattern (escaped with `\`) that matches it anywhere, its own % and _ taken literally. */
export const containing = (text: string): string => `%${text.replace(/[\\%_]/g, (char) => `\\${char}`)}%`;

/** Whether a scope allows nothing at all (an empty list): then no query need ask. */
export const emptyScope = (scope: ArtifactScope): boolean => scope.albums?.length === 0 || scope.types?.length === 0 || scope.models?.length === 0;
