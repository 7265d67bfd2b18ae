import { z } from 'zod';
import { ArtifactView } from './jobs.js';

/** What the gallery page asks first (`GET /v1/gallery`): the albums it may switch between, and what this grant may do. */
export const GalleryView = z.strictObject({
  /** Empty albums it is limited to are included: it may submit there. */
  albums: z.array(z.string()).describe('albums the grant may see that hold results, and any it is limited to'),
  /** The album a job that names none goes to. */
  defaultAlbum: z.string(),
  may: z.strictObject({ submit: z.boolean(), delete: z.boolean() }),
});
export type GalleryView = z.infer<typeof GalleryView>;

/** `GET /v1/artifacts`: published results, newest first. */
export const ArtifactPage = z.strictObject({ artifacts: z.array(ArtifactView), nextCursor: z.string().nullable() });
export type ArtifactPage = z.infer<typeof ArtifactPage>;

/** `DELETE /v1/jobs/:id/artifacts`: the digests that left the job's view, and those whose bytes left the store. */
export const RemovedResults = z.strictObject({
  jobId: z.string(),
  deleted: z.array(z.string()).describe('the digests that left the gallery and the job'),
  freed: z.array(z.string()).describe('those whose bytes left the store (nothing else named them)'),
  freedBytes: z.int(),
});
export type RemovedResults = z.infer<typeof RemovedResults>;
