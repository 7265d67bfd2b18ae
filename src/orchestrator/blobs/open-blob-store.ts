import { join } from 'node:path';
import type { MeshConfig } from '../config/config.js';
import type { BlobStore } from './blob-store.js';
import { LocalBlobStore } from './local-blob-store.js';
import { S3BlobStore } from './s3-blob-store.js';
import { s3ClientFor } from './s3-client.js';

/**
 * The blob store mesh.yaml's `blobs` names: the folder `<data>/blobs` (default), or a bucket — with its local spool
 * for streams being hashed under `<data>/blobs/tmp` (staged uploads stay on local disk too, in `<data>/blobs/staging`).
 */
export function openBlobStore(config: Pick<MeshConfig, 'blobs' | 'data'>): BlobStore {
  const folder = join(config.data, 'blobs');
  const blobs = config.blobs;
  switch (blobs.kind) {
    case 'local':
      return new LocalBlobStore(folder);
    case 's3':
      return new S3BlobStore({
        client: s3ClientFor(blobs), bucket: blobs.bucket, prefix: blobs.prefix, spoolDir: join(folder, 'tmp'),
        ...(blobs.presign ? { presignSeconds: blobs.presignSeconds } : {}),
      });
    default: {
      const never: never = blobs;
      // An invariant: the config's schema allows only the kinds above (and `never` keeps this switch whole).
      throw new Error(`unknown blob store ${JSON.stringify(never)}`);
    }
  }
}
