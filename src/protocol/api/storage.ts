import { z } from 'zod';

/** The disk under the data folder, as `GET /v1/storage`, `/v1/status` and `gpumesh status` show it. */
export const DiskView = z.strictObject({
  /** The folder whose filesystem is measured (the data folder: the store, the spool, local blobs). */
  path: z.string().describe('the data folder, whose filesystem is measured'),
  /** Bytes an unprivileged writer may still use (statfs's bavail), as last measured. */
  freeBytes: z.int().describe('free space, as last measured (at most a second ago when asked here)'),
  totalBytes: z.int(),
  minFreeBytes: z.int().describe('storage.minFreeMB: below it new uploads, jobs and model adds are refused (507 STORAGE_FULL); 0: no floor'),
  low: z.boolean().describe('below the floor now: new work is refused until space is back'),
  /** When it was measured; null if it never could be (then nothing is refused by the floor). */
  checkedAt: z.string().nullable().describe('when it was measured; null if it could not be'),
});
export type DiskView = z.infer<typeof DiskView>;

/** `GET /v1/storage`: the blobs stored (where, how many, their bytes) and the job retention in effect. */
export const StorageView = z.strictObject({
  blobs: z.strictObject({ location: z.string().describe('a folder, or s3://bucket/prefix'), count: z.int(), bytes: z.int() }),
  jobs: z.strictObject({
    retentionDays: z.int().describe('finished jobs no published result names are deleted this long after they ended; 0: never'),
    counts: z.record(z.string(), z.int()).describe('jobs kept, by status'),
  }),
  /** Absent from an orchestrator older than the floor. */
  disk: DiskView.optional().describe('the data folder\'s disk (always sent by this version)'),
});
export type StorageView = z.infer<typeof StorageView>;
