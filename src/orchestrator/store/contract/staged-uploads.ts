/** An upload in progress: its bytes so far are a file (the blob store's staging folder), its size the offset. */
export interface StagedUploadRecord {
  id: string;
  grantId: string;
  /** The size the client announced, if it did. */
  total: number | null;
  createdAt: number;
}

/** The staged_uploads table: resumable uploads from their start until they complete or are given up. */
export interface StagedUploadTable {
  insertStagedUpload(upload: StagedUploadRecord): void;
  deleteStagedUpload(id: string): void;
  getStagedUpload(id: string): Promise<StagedUploadRecord | null>;
  /** How many uploads a grant lineage has open (started, neither completed nor given up): its cap is checked with it. */
  countStagedUploads(grantId: string): Promise<number>;
  /** Uploads started before `before` (abandoned ones are swept). */
  stagedUploadsBefore(before: number): Promise<StagedUploadRecord[]>;
}

export interface StagedUploadRow { id: string; grant_id: string; total: number | null; created_at: number }

export const stagedUploadFromRow = (row: StagedUploadRow): StagedUploadRecord =>
  ({ id: row.id, grantId: row.grant_id, total: row.total, createdAt: row.created_at });
