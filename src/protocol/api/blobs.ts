import { z } from 'zod';

/** What a client learns of a file it stored (PUT /v1/blobs, an upload completed, an output): its digest, size and the media type its bytes have. */
export const StoredBlob = z.object({
  digest: z.string().describe('sha256:<64 hex>'),
  bytes: z.int().min(0),
  mediaType: z.string(),
});
export type StoredBlob = z.infer<typeof StoredBlob>;

/** `DELETE /v1/blobs/:digest`: the lineage's record is gone, and whether its bytes went too. */
export const ForgottenBlob = z.object({
  digest: z.string(),
  freed: z.boolean().describe('whether the bytes left the store (false: something else still names them)'),
  freedBytes: z.int().min(0),
});
export type ForgottenBlob = z.infer<typeof ForgottenBlob>;

/** A resumable upload's state (`/v1/uploads`, also in `Upload-Offset`). */
export const UploadView = z.object({
  id: z.string(),
  offset: z.int().min(0).describe('the bytes received: send the next chunk from here'),
  total: z.int().min(0).nullable().describe('the size given at the start, if one was'),
  url: z.string().describe('/v1/uploads/<id>'),
});
export type UploadView = z.infer<typeof UploadView>;
