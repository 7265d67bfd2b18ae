import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, renameSync, statSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../helpers/fake-clock.js';
import { BlobReader, type CorruptBlob } from '../../../src/orchestrator/blobs/blob-reader.js';
import { LocalBlobStore } from '../../../src/orchestrator/blobs/local-blob-store.js';
import { VerifiedMarks } from '../../../src/orchestrator/blobs/verified-marks.js';
import { MeshError } from '../../../src/protocol/index.js';
import { tempDirsPerTest } from '../../helpers/mesh.js';
import { meshRejection } from '../../helpers/errors.js';
import { drain } from '../../helpers/streams.js';

/** A blob store and reader in a temp folder, counting hashes (the onHashed seam) and corruption reports. */
function setup(options: { reverifyAfterMs?: number } = {}) {
  const root = newDir('gpumesh-blobs-');
  const clock = new FakeClock();
  const store = new LocalBlobStore(root);
  const hashed: string[] = [];
  const corrupt: { digest: string; detail: CorruptBlob }[] = [];
  const reader = new BlobReader({
    store, clock, ...options,
    onHashed: (digest) => hashed.push(digest),
    onCorrupt: (digest, detail) => corrupt.push({ digest, detail }),
  });
  return { root, clock, store, reader, hashed, corrupt };
}

const newDir = tempDirsPerTest();

async function readAll(reader: BlobReader, digest: string, recorded: number | null, range?: { start: number; end: number }) {
  const blob = await reader.open(digest, recorded);
  return drain(await blob.read(range));
}

const rejection = meshRejection;

function flipByte(path: string, at: number): void {
  const bytes = readFileSync(path);
  bytes[at] = bytes[at]! ^ 0xff;
  writeFileSync(path, bytes);
}

const SMALL = 10_000; // one chunk
const LARGE = 1_000_000; // many chunks

describe('BlobReader', () => {
  it('serves a good blob, hashing it once; later reads and ranges use the verified mark', async () => {
    const { store, reader, hashed } = setup();
    const bytes = randomBytes(LARGE);
    const { digest } = await store.putBytes(bytes);
    const first = await readAll(reader, digest, LARGE);
    expect(first.error).toBeNull();
    expect(first.bytes.equals(bytes)).toBe(true);
    expect(hashed).toEqual([digest]);
    expect((await readAll(reader, digest, LARGE)).bytes.equals(bytes)).toBe(true);
    const range = await readAll(reader, digest, LARGE, { start: 100, end: 70_000 });
    expect(range.bytes.equals(bytes.subarray(100, 70_001))).toBe(true);
    expect(hashed).toHaveLength(1);
  });

  it('a change of the file\'s stat signature, or the mark\'s age, means hashing again', async () => {
    const { store, reader, hashed, clock } = setup({ reverifyAfterMs: 60_000 });
    const bytes = randomBytes(SMALL);
    const { digest } = await store.putBytes(bytes);
    await readAll(reader, digest, SMALL);
    await readAll(reader, digest, SMALL);
    expect(hashed).toHaveLength(1);
    // Same bytes, new mtime: the mark no longer describes this file.
    const later = new Date(statSync(store.pathOf(digest)).mtimeMs + 5_000);
    utimesSync(store.pathOf(digest), later, later);
    await readAll(reader, digest, SMALL);
    expect(hashed).toHaveLength(2);
    await readAll(reader, digest, SMALL);
    expect(hashed).toHaveLength(2);
    clock.advance(60_000);
    await readAll(reader, digest, SMALL);
    expect(hashed).toHaveLength(3);
  });

  it('a file of another size than recorded is refused on open, quarantined and reported; then it is a clear error', async () => {
    const { root, store, reader, corrupt, hashed } = setup();
    const { digest } = await store.putBytes(randomBytes(SMALL));
    truncateSync(store.pathOf(digest), SMALL - 1);
    const error = await rejection(reader.open(digest, SMALL));
    expect(error.code).toBe('INTEGRITY_FAILED');
    expect(error.message).toContain(`${SMALL - 1} bytes, not the ${SMALL} bytes recorded`);
    expect(hashed).toEqual([]); // caught without reading a byte
    expect(existsSync(store.pathOf(digest))).toBe(false);
    const quarantined = readdirSync(join(root, 'quarantine'));
    expect(quarantined).toHaveLength(1);
    expect(quarantined[0]).toMatch(new RegExp(`^${digest.replace(':', '-')}\\.\\d{4}-\\d\\d-\\d\\dT`));
    expect(statSync(join(root, 'quarantine', quarantined[0]!)).size).toBe(SMALL - 1);
    expect(corrupt).toEqual([{ digest, detail: { check: 'size', expected: `${SMALL} bytes`, actual: `${SMALL - 1} bytes`, quarantinedTo: join(root, 'quarantine', quarantined[0]!) } }]);
    const again = await rejection(reader.open(digest, SMALL));
    expect(again.code).toBe('INTEGRITY_FAILED');
    expect(again.message).toContain('moved to quarantine');
    expect(corrupt).toHaveLength(1);
    expect((await rejection(reader.open(`sha256:${'1'.repeat(64)}`, null))).code).toBe('NOT_FOUND');
  });

  it('a small blob with flipped bytes fails before its first byte, and is quarantined', async () => {
    const { store, reader, corrupt } = setup();
    const { digest } = await store.putBytes(randomBytes(SMALL));
    flipByte(store.pathOf(digest), 1234);
    const blob = await reader.open(digest, SMALL);
    const error = await rejection(blob.read());
    expect(error.code).toBe('INTEGRITY_FAILED');
    expect(error.message).toMatch(/its bytes hash to sha256:[0-9a-f]{64}; it was moved to quarantine/);
    expect(existsSync(store.pathOf(digest))).toBe(false);
    expect(corrupt).toHaveLength(1);
    expect(corrupt[0]!.detail.check).toBe('hash');
  });

  it('a large blob with flipped bytes streams, then fails short of its end (the last chunk is held back)', async () => {
    const { store, reader, corrupt } = setup();
    const bytes = randomBytes(LARGE);
    const { digest } = await store.putBytes(bytes);
    flipByte(store.pathOf(digest), LARGE - 1);
    const { bytes: received, error } = await readAll(reader, digest, LARGE);
    expect(error).toBeInstanceOf(MeshError);
    expect((error as MeshError).code).toBe('INTEGRITY_FAILED');
    expect(received.length).toBeGreaterThan(0);
    expect(received.length).toBeLessThan(LARGE);
    expect(existsSync(store.pathOf(digest))).toBe(false);
    expect(corrupt.map((report) => report.detail.check)).toEqual(['hash']);
  });

  it('a range of an unverified blob hashes the whole blob first: good → the exact bytes, corrupt → refused before a byte', async () => {
    const { store, reader, hashed, corrupt } = setup();
    const good = randomBytes(LARGE);
    const { digest } = await store.putBytes(good);
    const range = await readAll(reader, digest, LARGE, { start: LARGE - 10, end: LARGE - 1 });
    expect(range.bytes.equals(good.subarray(LARGE - 10))).toBe(true);
    expect(hashed).toEqual([digest]);

    const bad = await store.putBytes(randomBytes(LARGE));
    flipByte(store.pathOf(bad.digest), 5);
    const blob = await reader.open(bad.digest, LARGE);
    // The flipped byte is outside the range asked for; the range is refused all the same.
    expect((await rejection(blob.read({ start: 100, end: 200 }))).code).toBe('INTEGRITY_FAILED');
    expect(corrupt.map((report) => report.digest)).toEqual([bad.digest]);
  });

  it('concurrent range requests for an unverified blob share one hash, and a corrupt one is reported once', async () => {
    const { store, reader, hashed, corrupt } = setup();
    const good = await store.putBytes(randomBytes(LARGE));
    const results = await Promise.all(Array.from({ length: 5 }, (_, i) => readAll(reader, good.digest, LARGE, { start: i * 1000, end: i * 1000 + 99 })));
    expect(results.map((result) => result.bytes.length)).toEqual([100, 100, 100, 100, 100]);
    expect(hashed).toEqual([good.digest]);

    const bad = await store.putBytes(randomBytes(LARGE));
    flipByte(store.pathOf(bad.digest), 5);
    const blobs = await Promise.all(Array.from({ length: 3 }, () => reader.open(bad.digest, LARGE)));
    const errors = await Promise.all(blobs.map((blob) => rejection(blob.read({ start: 0, end: 9 }))));
    expect(errors.map((error) => error.code)).toEqual(['INTEGRITY_FAILED', 'INTEGRITY_FAILED', 'INTEGRITY_FAILED']);
    expect(corrupt).toHaveLength(1);
  });

  it('an empty blob verifies and streams nothing', async () => {
    const { store, reader, hashed } = setup();
    const { digest } = await store.putBytes(new Uint8Array(0));
    const result = await readAll(reader, digest, 0);
    expect(result).toEqual({ bytes: Buffer.alloc(0), error: null });
    expect(hashed).toEqual([digest]);
  });
});

describe('LocalBlobStore: quarantining an open blob', () => {
  it('moves nothing when the path now holds another file (a fresh copy) or none', async () => {
    const { root, store } = setup();
    const bytes = randomBytes(100);
    const { digest } = await store.putBytes(bytes);
    const stale = (await store.open(digest))!;
    // A fresh copy of the same digest replaces the file the stale handle found corrupt: it is not moved.
    const fresh = join(root, 'fresh');
    writeFileSync(fresh, bytes);
    renameSync(fresh, store.pathOf(digest));
    expect(await stale.quarantine(0)).toBeNull();
    expect(existsSync(store.pathOf(digest))).toBe(true);
    await stale.close();
    const current = (await store.open(digest))!;
    expect(await current.quarantine(0)).toMatch(/quarantine\/sha256-[0-9a-f]{64}\.1970-01-01T00-00-00\.000Z$/);
    expect(await current.quarantine(0)).toBeNull();
    await current.close();
  });
});

describe('VerifiedMarks', () => {
  it('forgets the least recently used mark beyond its capacity', () => {
    const marks = new VerifiedMarks({ clock: new FakeClock(), maxAgeMs: 1_000, capacity: 2 });
    marks.mark('a', 's');
    marks.mark('b', 's');
    expect(marks.isCurrent('a', 's')).toBe(true); // a is now the most recent
    marks.mark('c', 's');
    expect(marks.size).toBe(2);
    expect(marks.isCurrent('b', 's')).toBe(false);
    expect(marks.isCurrent('a', 's')).toBe(true);
    expect(marks.isCurrent('c', 'other signature')).toBe(false);
    expect(marks.isCurrent('c', 's')).toBe(false); // a mismatch dropped it
  });
});
