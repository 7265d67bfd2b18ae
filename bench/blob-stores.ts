/**
 * Blob store throughput, side by side in one run: the local folder (LocalBlobStore) and an S3 bucket (S3BlobStore)
 * on s3rver, the stand-in S3 server on loopback. For each store and size: puts (putBytes of fresh bytes, as an inline
 * output or a client's upload arrives — the folder's inline path is putSmallSync, shown too), then verified reads of
 * the whole blob through BlobReader (the first read of each blob hashes it). Printed as a table and written to
 * bench/out/blob-stores.json. s3rver is a Node process writing files: it stands in for the protocol, not for the
 * speed of MinIO or AWS, so the S3 figures show the cost of the protocol and round trips, not of a real server.
 */
import { randomBytes } from 'node:crypto';
import { BlobReader } from '../src/orchestrator/blobs/blob-reader.js';
import type { BlobStore } from '../src/orchestrator/blobs/blob-store.js';
import { LocalBlobStore } from '../src/orchestrator/blobs/local-blob-store.js';
import { S3BlobStore } from '../src/orchestrator/blobs/s3-blob-store.js';
import { s3ClientFor } from '../src/orchestrator/blobs/s3-client.js';
import { systemClock } from '../src/protocol/clock.js';
import { sha256Digest } from '../src/protocol/index.js';
import { removeDir, tempDir } from '../test/helpers/mesh.js';
import { startS3StandIn } from '../test/helpers/s3-stand-in.js';
import { machine, printTable, writeResults } from './lib.js';

const SIZES = [
  { label: '64 KiB', bytes: 64 * 1024, count: 300 },
  { label: '1 MiB', bytes: 1024 * 1024, count: 60 },
  { label: '32 MiB', bytes: 32 * 1024 * 1024, count: 4 },
];
/** Puts (and reads) in flight at once, as concurrent jobs' outputs would be. */
const CONCURRENCY = 8;

async function inParallel(count: number, task: (index: number) => Promise<unknown>): Promise<number> {
  const started = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < count) await task(next++);
  }));
  return (performance.now() - started) / 1000;
}

async function measure(name: string, store: BlobStore): Promise<Record<string, unknown>[]> {
  const reader = new BlobReader({ store, clock: systemClock, onCorrupt: () => { throw new Error('corrupt'); } });
  const results: Record<string, unknown>[] = [];
  for (const size of SIZES) {
    const blobs = Array.from({ length: size.count }, () => randomBytes(size.bytes));
    const digests: string[] = [];
    const putSeconds = await inParallel(size.count, async (index) => {
      digests[index] = (await store.putBytes(blobs[index]!)).digest;
    });
    const getSeconds = await inParallel(size.count, async (index) => reader.bytes(digests[index]!, size.bytes));
    const megabytes = (size.count * size.bytes) / 1024 / 1024;
    results.push({ store: name, size: size.label, bytes: size.bytes, count: size.count, op: 'put', opsPerSecond: size.count / putSeconds, mbPerSecond: megabytes / putSeconds });
    results.push({ store: name, size: size.label, bytes: size.bytes, count: size.count, op: 'get (verified)', opsPerSecond: size.count / getSeconds, mbPerSecond: megabytes / getSeconds });
    if (store.putSmallSync && size.bytes <= 256 * 1024) {
      const fresh = Array.from({ length: size.count }, () => randomBytes(size.bytes));
      const started = performance.now();
      for (const bytes of fresh) store.putSmallSync(bytes, sha256Digest(bytes));
      const seconds = (performance.now() - started) / 1000;
      results.push({ store: name, size: size.label, bytes: size.bytes, count: size.count, op: 'putSmallSync (inline path)', opsPerSecond: size.count / seconds, mbPerSecond: megabytes / seconds });
    }
  }
  return results;
}

const folder = tempDir('gpumesh-bench-blobs-');
const standIn = await startS3StandIn('gpumesh-bench');
try {
  const local = new LocalBlobStore(folder);
  const s3 = new S3BlobStore({
    client: s3ClientFor({ kind: 's3', bucket: standIn.bucket, prefix: 'bench/', endpoint: standIn.endpoint, region: 'us-east-1', ...standIn.credentials, maxAttempts: 3 }),
    bucket: standIn.bucket, prefix: 'bench/', spoolDir: tempDir('gpumesh-bench-spool-'),
  });
  const results = [...await measure('local folder', local), ...await measure('S3 (s3rver stand-in)', s3)];
  printTable(`blob stores, ${CONCURRENCY} operations in flight`, ['store', 'size', 'operation', 'ops/s', 'MB/s'],
    results.map((result) => [String(result.store), String(result.size), String(result.op), (result.opsPerSecond as number).toFixed(0), (result.mbPerSecond as number).toFixed(1)]));
  process.stdout.write(`wrote ${writeResults('blob-stores', { machine: machine(), concurrency: CONCURRENCY, results })}\n`);
} finally {
  await standIn.stop();
  removeDir(folder);
}
