import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BlobReader, type CorruptBlob } from '../../../src/orchestrator/blobs/blob-reader.js';
import type { BlobStore } from '../../../src/orchestrator/blobs/blob-store.js';
import { LocalBlobStore } from '../../../src/orchestrator/blobs/local-blob-store.js';
import { S3BlobStore } from '../../../src/orchestrator/blobs/s3-blob-store.js';
import { s3ClientFor } from '../../../src/orchestrator/blobs/s3-client.js';
import { MeshError, sha256Digest } from '../../../src/protocol/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { removeDir, tempDir } from '../../helpers/mesh.js';
import { startS3StandIn, type S3StandIn } from '../../helpers/s3-stand-in.js';
import { meshRejection } from '../../helpers/errors.js';
import { drain } from '../../helpers/streams.js';

/**
 * One suite, every implementation of the blob store: what any store must do (put, get, has, ranges, dedupe, the
 * digest and size checks on write, verify-on-read with quarantine through BlobReader), run against the local folder
 * and against an S3 bucket served by s3rver, a stand-in S3-protocol server on loopback. Each implementation comes
 * with a factory and two ways to hurt it, as a failing disk or a careless operator would.
 */
interface Fixture {
  store: BlobStore;
  /** Replace a stored blob's bytes, behind the store's back. */
  corrupt(digest: string, bytes: Buffer): Promise<void>;
  /** How many blobs are stored under digest names. */
  count(): Promise<number>;
  /** Anything left anywhere in the store besides blobs (temporary files or objects, spooled streams). */
  leftovers(): Promise<string[]>;
}

interface Implementation {
  name: string;
  /** A fresh, empty store. */
  make(): Promise<Fixture>;
  setUp?(): Promise<void>;
  tearDown?(): Promise<void>;
}

const dirs: string[] = [];
let standIn: S3StandIn | undefined;
let buckets = 0;

/** Small enough that a 12 MiB blob goes up as a multipart upload of three parts. */
const S3_PARTS = { multipartThreshold: 6 * 1024 * 1024, partSize: 5 * 1024 * 1024 };

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile()).map((entry) => join(entry.parentPath, entry.name));
}

const implementations: Implementation[] = [
  {
    name: 'LocalBlobStore (a folder)',
    async make() {
      const root = tempDir('gpumesh-blobs-');
      dirs.push(root);
      const store = new LocalBlobStore(root);
      return {
        store,
        corrupt: async (digest, bytes) => writeFileSync(store.pathOf(digest), bytes),
        count: async () => filesUnder(join(root, 'sha256')).length,
        leftovers: async () => filesUnder(join(root, 'tmp')),
      };
    },
  },
  {
    name: 'S3BlobStore (s3rver as the stand-in S3 server)',
    async setUp() {
      standIn = await startS3StandIn();
    },
    async tearDown() {
      await standIn?.stop();
    },
    async make() {
      const s3 = standIn!;
      // Each store its own prefix in the one bucket, as two meshes sharing a bucket would.
      const prefix = `mesh-${++buckets}/`;
      const spoolDir = tempDir('gpumesh-spool-');
      dirs.push(spoolDir);
      const client = s3ClientFor({ kind: 's3', bucket: s3.bucket, prefix, endpoint: s3.endpoint, region: 'us-east-1', ...s3.credentials, maxAttempts: 2 });
      const store = new S3BlobStore({ client, bucket: s3.bucket, prefix, spoolDir, ...S3_PARTS });
      const keys = async (under: string): Promise<string[]> =>
        ((await s3.client.send(new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: `${prefix}${under}` }))).Contents ?? []).map((object) => object.Key!);
      return {
        store,
        corrupt: async (digest, bytes) => {
          await s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: store.keyOf(digest), Body: bytes }));
        },
        count: async () => (await keys('sha256/')).length,
        leftovers: async () => [...await keys('tmp/'), ...filesUnder(spoolDir)],
      };
    },
  },
];

const rejection = meshRejection;

function readerOf(store: BlobStore) {
  const hashed: string[] = [];
  const corrupt: { digest: string; detail: CorruptBlob }[] = [];
  const reader = new BlobReader({ store, clock: new FakeClock(), onHashed: (digest) => hashed.push(digest), onCorrupt: (digest, detail) => corrupt.push({ digest, detail }) });
  return { reader, hashed, corrupt };
}

afterAll(() => {
  for (const dir of dirs.splice(0)) removeDir(dir);
});

for (const implementation of implementations) {
  describe(`blob store conformance: ${implementation.name}`, () => {
    beforeAll(async () => implementation.setUp?.());
    afterAll(async () => implementation.tearDown?.());

    it('puts bytes and streams, and gives them back: has, open, read whole and in ranges', async () => {
      const { store } = await implementation.make();
      const bytes = randomBytes(100_000);
      const digest = sha256Digest(bytes);
      expect(await store.has(digest)).toBe(false);
      expect(await store.open(digest)).toBeNull();
      expect(await store.read(digest)).toBeNull();
      expect(await store.putBytes(bytes)).toEqual({ digest, bytes: bytes.length });
      expect(await store.has(digest)).toBe(true);
      expect((await store.read(digest))!.equals(bytes)).toBe(true);
      expect((await store.read(digest, { start: 10, end: 4_110 }))!.equals(bytes.subarray(10, 4_110))).toBe(true);
      // A range past the end gives what there is (a media-type sniff of a small blob).
      expect((await store.read(digest, { start: 99_990, end: 200_000 }))!.equals(bytes.subarray(99_990))).toBe(true);
      const streamed = randomBytes(300_000);
      expect(await store.putStream(Readable.from([streamed.subarray(0, 1000), streamed.subarray(1000)]))).toEqual({ digest: sha256Digest(streamed), bytes: streamed.length });
      const handle = (await store.open(sha256Digest(streamed)))!;
      expect(handle.size).toBe(streamed.length);
      const chunks: Buffer[] = [];
      for await (const chunk of handle.chunks(5, 200_005, 64 * 1024)) chunks.push(chunk);
      expect(Buffer.concat(chunks).equals(streamed.subarray(5, 200_005))).toBe(true);
      await handle.close();
      await handle.close(); // closing twice is harmless
    });

    it('stores an empty blob', async () => {
      const { store } = await implementation.make();
      const { digest } = await store.putBytes(Buffer.alloc(0));
      const { reader } = readerOf(store);
      expect((await reader.bytes(digest, 0)).length).toBe(0);
      expect((await store.read(digest, { start: 0, end: 4100 }))!.length).toBe(0);
    });

    it('keeps the same bytes once, however they arrive', async () => {
      const { store, count } = await implementation.make();
      const bytes = randomBytes(50_000);
      const first = await store.putBytes(bytes);
      const second = await store.putStream(Readable.from([bytes]));
      const third = await store.putBytes(bytes, first.digest);
      expect(second).toEqual(first);
      expect(third).toEqual(first);
      if (store.putSmallSync) store.putSmallSync(bytes, first.digest);
      expect(await count()).toBe(1);
    });

    it('refuses bytes that are not their digest, or past the limit, and keeps nothing of them', async () => {
      const { store, count, leftovers } = await implementation.make();
      const bytes = randomBytes(70_000);
      const wrong = sha256Digest(Buffer.from('something else'));
      expect((await rejection(store.putBytes(bytes, wrong))).code).toBe('DIGEST_MISMATCH');
      expect((await rejection(store.putStream(Readable.from([bytes]), { expected: wrong }))).code).toBe('DIGEST_MISMATCH');
      expect((await rejection(store.putStream(Readable.from([bytes]), { limit: 69_999 }))).code).toBe('PAYLOAD_TOO_LARGE');
      if (store.putSmallSync) expect(() => store.putSmallSync!(bytes, wrong)).toThrow(/hash to/);
      expect(await store.has(sha256Digest(bytes))).toBe(false);
      expect(await count()).toBe(0);
      expect(await leftovers()).toEqual([]);
    });

    it('takes in a local file already hashed (a completed upload) and removes the file; a blob already there wins', async () => {
      const { store, count } = await implementation.make();
      const staging = tempDir('gpumesh-staging-');
      dirs.push(staging);
      const bytes = randomBytes(40_000);
      const digest = sha256Digest(bytes);
      for (const name of ['first', 'again']) {
        writeFileSync(join(staging, name), bytes);
        await store.adopt(join(staging, name), digest);
        expect(existsSync(join(staging, name))).toBe(false);
      }
      expect((await store.read(digest))!.equals(bytes)).toBe(true);
      expect(await count()).toBe(1);
    });

    it('a large blob (a multipart upload to a bucket) round-trips whole and verified', async () => {
      const { store, leftovers } = await implementation.make();
      const bytes = randomBytes(12 * 1024 * 1024 + 123);
      const stored = await store.putStream(Readable.from([bytes]));
      expect(stored).toEqual({ digest: sha256Digest(bytes), bytes: bytes.length });
      const { reader, hashed } = readerOf(store);
      expect((await reader.bytes(stored.digest, bytes.length)).equals(bytes)).toBe(true);
      expect(hashed).toEqual([stored.digest]);
      expect(await leftovers()).toEqual([]);
    });

    it('verifies on read: a range is served from a blob hashed first, then from its verified mark', async () => {
      const { store } = await implementation.make();
      const bytes = randomBytes(1_000_000);
      const { digest } = await store.putBytes(bytes);
      const { reader, hashed } = readerOf(store);
      const range = await drain(await (await reader.open(digest, bytes.length)).read({ start: 1000, end: 500_000 }));
      expect(range.error).toBeNull();
      expect(range.bytes.equals(bytes.subarray(1000, 500_001))).toBe(true);
      expect(hashed).toEqual([digest]);
      const whole = await drain(await (await reader.open(digest, bytes.length)).read());
      expect(whole.bytes.equals(bytes)).toBe(true);
      expect(hashed).toHaveLength(1);
    });

    it('a blob whose bytes changed is refused on read, quarantined and reported; later it is a clear error', async () => {
      const { store, corrupt: tamper, count } = await implementation.make();
      const bytes = randomBytes(1_000_000);
      const { digest } = await store.putBytes(bytes);
      const flipped = Buffer.from(bytes);
      flipped[999_999] = flipped[999_999]! ^ 0xff;
      await tamper(digest, flipped);
      const { reader, corrupt } = readerOf(store);
      // Hashed as it streams, the last chunk held back: the body breaks off short of its end.
      const served = await drain(await (await reader.open(digest, bytes.length)).read());
      expect((served.error as MeshError).code).toBe('INTEGRITY_FAILED');
      expect(served.bytes.length).toBeLessThan(bytes.length);
      expect(corrupt).toHaveLength(1);
      expect(corrupt[0]).toMatchObject({ digest, detail: { check: 'hash', expected: digest, actual: sha256Digest(flipped) } });
      expect(corrupt[0]!.detail.quarantinedTo).toContain('quarantine/sha256-');
      expect(await store.has(digest)).toBe(false);
      expect(await count()).toBe(0);
      expect(await store.quarantined(digest)).toBe(corrupt[0]!.detail.quarantinedTo);
      const again = await rejection(reader.open(digest, bytes.length));
      expect(again.code).toBe('INTEGRITY_FAILED');
      expect(again.message).toContain('moved to quarantine');
      // A good copy stored again is served again.
      await store.putBytes(bytes);
      expect((await reader.bytes(digest, bytes.length)).equals(bytes)).toBe(true);
    });

    it('a blob of another size than recorded is refused on open, before a byte is read, and quarantined', async () => {
      const { store, corrupt: tamper } = await implementation.make();
      const bytes = randomBytes(10_000);
      const { digest } = await store.putBytes(bytes);
      await tamper(digest, bytes.subarray(0, 9_999));
      const { reader, corrupt, hashed } = readerOf(store);
      const error = await rejection(reader.open(digest, bytes.length));
      expect(error.code).toBe('INTEGRITY_FAILED');
      expect(error.message).toContain('9999 bytes, not the 10000 bytes recorded');
      expect(hashed).toEqual([]);
      expect(corrupt).toMatchObject([{ digest, detail: { check: 'size' } }]);
      expect(await store.quarantined(digest)).not.toBeNull();
      expect(await store.has(digest)).toBe(false);
    });

    it('a blob not stored is NOT_FOUND; remove deletes one', async () => {
      const { store } = await implementation.make();
      const { reader } = readerOf(store);
      const { digest } = await store.putBytes(randomBytes(1000));
      await store.remove(digest);
      await store.remove(digest); // twice is fine
      expect(await store.has(digest)).toBe(false);
      expect((await rejection(reader.open(digest, null))).code).toBe('NOT_FOUND');
      expect(await store.quarantined(digest)).toBeNull();
    });
  });
}
