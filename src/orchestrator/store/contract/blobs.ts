/** A blob the store holds, by digest (its bytes are in the blob store). */
export interface BlobRecord {
  digest: string;
  bytes: number;
  mediaType: string;
}

/** The blobs and uploads tables: what the blob store holds, and which job's upload grant delivered which output. */
export interface BlobTable {
  recordBlob(blob: BlobRecord, now: number): void;
  /** Remember that a job's upload grant delivered this blob; publishing checks it. */
  recordUpload(jobId: string, digest: string, now: number): void;
  getBlob(digest: string): Promise<BlobRecord | null>;
  wasUploadedFor(jobId: string, digest: string): Promise<boolean>;
  /** Forget that a job's outputs were uploaded for it (its published results were deleted: it names them no more). */
  forgetUploads(jobId: string, digests: readonly string[]): void;
  /** Whether a row names the blob: a published result, an upload for a job, a client's file, a job's input. */
  blobNamed(digest: string): Promise<boolean>;
  /** The blob's record goes with its bytes (reclaimed). */
  deleteBlob(digest: string): void;
  /** A page of blob records after `after` in digest order, with those no row names; `last`: the next page's `after`, null at the end. */
  unnamedBlobs(after: string | null, limit: number): Promise<{ unnamed: string[]; last: string | null }>;
  /** How many blobs are recorded, and their bytes. */
  blobTotals(): Promise<{ count: number; bytes: number }>;
}

export interface BlobRow { digest: string; bytes: number; media_type: string }

export const blobFromRow = (row: BlobRow): BlobRecord => ({ digest: row.digest, bytes: row.bytes, mediaType: row.media_type });

/** A page of `unnamedBlobs` from the rows looked at (`limit` asked for): the unnamed ones, and where the next page starts. */
export function unnamedPage(rows: readonly { digest: string; named: unknown }[], limit: number): { unnamed: string[]; last: string | null } {
  return { unnamed: rows.filter((row) => !row.named).map((row) => row.digest), last: rows.length === limit ? rows.at(-1)!.digest : null };
}
