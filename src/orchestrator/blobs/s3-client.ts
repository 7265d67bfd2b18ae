import { S3Client } from '@aws-sdk/client-s3';
import type { S3BlobsConfig } from '../config/config.js';

/**
 * The S3 client for mesh.yaml's `blobs: {kind: s3, …}`. What matters beyond the obvious:
 *
 * - `requestChecksumCalculation` and `responseChecksumValidation` are `WHEN_REQUIRED`. Since early 2025 the AWS SDKs
 *   send a CRC32 flexible checksum with every upload by default, as `Content-Encoding: aws-chunked` with the checksum
 *   in a trailer, and expect checksums on downloads. Several S3-compatible servers refuse or mangle those uploads
 *   (older MinIO, Garage before 1.x, Ceph RGW before Squid, s3rver), and gpumesh does not need them: it hashes every
 *   byte with SHA-256 itself, on the way in and on the way out (docs/operations.md, *Blobs in a bucket*).
 * - Connection and socket timeouts, so a bucket that stops answering fails a request instead of holding it forever;
 *   the SDK's own retries (`maxAttempts`, with backoff) ride out a short outage.
 * - Path-style addressing with a custom endpoint (what MinIO, Garage and Ceph expect), unless told otherwise.
 */
export function s3ClientFor(config: Omit<S3BlobsConfig, 'presign' | 'presignSeconds'>): S3Client {
  // The SDK warns, once per process, that versions published after January 2027 will need Node 22. gpumesh pins the
  // SDK's version and supports Node 20; the warning would only alarm an operator about a version gpumesh does not use.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  return new S3Client({
    region: config.region,
    ...(config.endpoint !== undefined && { endpoint: config.endpoint }),
    forcePathStyle: config.forcePathStyle ?? config.endpoint !== undefined,
    ...(config.accessKeyId !== undefined && config.secretAccessKey !== undefined && {
      credentials: { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey },
    }),
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: config.maxAttempts,
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 60_000 },
  });
}
