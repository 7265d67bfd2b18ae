import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { Readable } from 'node:stream';
import { HeadObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BlobReader } from '../../../src/orchestrator/blobs/blob-reader.js';
import { S3BlobStore } from '../../../src/orchestrator/blobs/s3-blob-store.js';
import { s3ClientFor } from '../../../src/orchestrator/blobs/s3-client.js';
import { MeshError, sha256Digest } from '../../../src/protocol/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { removeDir, tempDir } from '../../helpers/mesh.js';
import { startS3StandIn, type S3StandIn } from '../../helpers/s3-stand-in.js';
import { TcpCut } from '../../helpers/tcp-cut.js';
import { meshRejection } from '../../helpers/errors.js';

/**
 * A bucket that goes away mid-upload: the S3 store in front of s3rver (the stand-in S3 server) through a TCP proxy
 * that cuts every connection as a network outage would. An upload is retried by the SDK when the bucket is back at
 * once, fails cleanly (BLOB_STORE_UNAVAILABLE, 503 with Retry-After) when it stays away, and never leaves anything
 * under a digest's key; once the bucket is back the same upload goes through.
 */
let standIn: S3StandIn;
let proxy: TcpCut;
let spool: string;
let store: S3BlobStore;
const PREFIX = 'outage/';

beforeAll(async () => {
  standIn = await startS3StandIn();
  proxy = await TcpCut.start(standIn.port);
  spool = tempDir('gpumesh-spool-');
  const client = s3ClientFor({
    kind: 's3', bucket: standIn.bucket, prefix: PREFIX, endpoint: proxy.url, region: 'us-east-1', ...standIn.credentials,
    maxAttempts: 3,
  });
  store = new S3BlobStore({ client, bucket: standIn.bucket, prefix: PREFIX, spoolDir: spool, multipartThreshold: 6 * 1024 * 1024, partSize: 5 * 1024 * 1024, retryAfterS: 2 });
});

afterAll(async () => {
  await proxy.stop();
  await standIn.stop();
  removeDir(spool);
});

const rejection = meshRejection;

/** Whether the bucket itself (asked directly, not through the proxy) holds anything under the digest's key. */
async function published(digest: string): Promise<boolean> {
  try {
    await standIn.client.send(new HeadObjectCommand({ Bucket: standIn.bucket, Key: store.keyOf(digest) }));
    return true;
  } catch {
    return false;
  }
}

const verified = (): BlobReader => new BlobReader({ store, clock: new FakeClock(), onCorrupt: () => { throw new Error('nothing should be corrupt'); } });

describe('S3 blob store: a bucket outage mid-upload (s3rver as the stand-in, behind a proxy that cuts connections)', () => {
  it('a put cut off midway, the bucket back at once: the SDK sends it again and the blob is whole', async () => {
    const bytes = randomBytes(2 * 1024 * 1024);
    const cut = proxy.cutAfter(512 * 1024);
    const stored = store.putBytes(bytes);
    await cut;
    await proxy.restore();
    expect(await stored).toEqual({ digest: sha256Digest(bytes), bytes: bytes.length });
    expect((await verified().bytes(sha256Digest(bytes), bytes.length)).equals(bytes)).toBe(true);
  });

  it('a put cut off midway, the bucket staying away: a clear 503, nothing under the digest; it goes through once the bucket is back', async () => {
    const bytes = randomBytes(3 * 1024 * 1024);
    const digest = sha256Digest(bytes);
    const cut = proxy.cutAfter(1024 * 1024);
    const failed = rejection(store.putStream(Readable.from([bytes])));
    await cut;
    const error = await failed;
    expect(error.code).toBe('BLOB_STORE_UNAVAILABLE');
    expect(error.status).toBe(503);
    expect(error.headers['retry-after']).toBe('2');
    expect(error.message).toContain(`s3://${standIn.bucket}/${PREFIX}`);
    expect(await published(digest)).toBe(false);
    expect(readdirSync(spool)).toEqual([]); // the spooled stream is gone too
    // Reads while it is away are the same clear error, not a hang or a 500.
    expect((await rejection(verified().open(digest, null))).code).toBe('BLOB_STORE_UNAVAILABLE');
    await proxy.restore();
    expect(await store.putStream(Readable.from([bytes]))).toEqual({ digest, bytes: bytes.length });
    expect(await published(digest)).toBe(true);
    expect((await verified().bytes(digest, bytes.length)).equals(bytes)).toBe(true);
  });

  it('a multipart upload cut off midway fails cleanly and is aborted: no object under the digest; then it goes through', async () => {
    const bytes = randomBytes(13 * 1024 * 1024);
    const digest = sha256Digest(bytes);
    const cut = proxy.cutAfter(7 * 1024 * 1024);
    const failed = rejection(store.putStream(Readable.from([bytes])));
    await cut;
    const error = await failed;
    expect(error.code).toBe('BLOB_STORE_UNAVAILABLE');
    expect(error.message).toContain('multipart');
    expect(await published(digest)).toBe(false);
    await proxy.restore();
    expect(await store.putStream(Readable.from([bytes]))).toEqual({ digest, bytes: bytes.length });
    expect((await verified().bytes(digest, bytes.length)).equals(bytes)).toBe(true);
    // Every object under a digest's key in the bucket is whole: it hashes to its name.
    const listed = await standIn.client.send(new ListObjectsV2Command({ Bucket: standIn.bucket, Prefix: `${PREFIX}sha256/` }));
    for (const object of listed.Contents ?? []) {
      const named = `sha256:${object.Key!.split('/').at(-1)!}`;
      expect((await verified().bytes(named, object.Size!)).length).toBe(object.Size);
    }
  });
});
