import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { ClientBlobs } from '../../../src/orchestrator/blobs/client-blobs.js';
import { InputImages } from '../../../src/orchestrator/blobs/input-images.js';
import { LocalBlobStore } from '../../../src/orchestrator/blobs/local-blob-store.js';
import { StagedUploads } from '../../../src/orchestrator/blobs/staged-uploads.js';
import { SqliteStore } from '../../../src/orchestrator/store/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { tempDirsPerTest } from '../../helpers/mesh.js';
import { meshRejection } from '../../helpers/errors.js';
import { DigestLocks } from '../../../src/orchestrator/blobs/digest-locks.js';
import { BlobReclaimer } from '../../../src/orchestrator/blobs/reclaim.js';

/**
 * Clients' files judged before they are stored, on a real folder and an in-memory SQLite (fake clock): the pictures a
 * request carries taken back when it is refused after they were stored (the race `JobAdmission.submitAll` guards),
 * without touching bytes that were there before it or that another request stored meanwhile; an upload refused at
 * completion gone whole; abandoned uploads swept while the orchestrator runs.
 */
const newDir = tempDirsPerTest();

function setup() {
  const dir = newDir();
  const store = new SqliteStore(':memory:');
  const { commits } = store;
  const clock = new FakeClock(Date.parse('2026-12-02T10:00:00Z'));
  const blobs = new LocalBlobStore(join(dir, 'blobs'));
  const pictures = new InputImages({ store, commits, clock, blobs });
  const locks = new DigestLocks();
  const reclaimer = new BlobReclaimer({ store, commits, blobs, locks, pictures, modelFile: () => false });
  const clientBlobs = new ClientBlobs({ store, commits, clock, blobs, locks, reclaimer, limitBytes: 1024 * 1024, pictures, incomingDir: join(dir, 'blobs', 'incoming') });
  const uploads = new StagedUploads({ store, commits, clock, blobs, dir: join(dir, 'blobs', 'staging'), limitBytes: 1024 * 1024 });
  /** The digests the folder holds. */
  const held = (): string[] => {
    const root = join(dir, 'blobs', 'sha256');
    try {
      return readdirSync(root).flatMap((prefix) => readdirSync(join(root, prefix))).map((hex) => `sha256:${hex}`).sort();
    } catch {
      return [];
    }
  };
  return { store, commits, clock, blobs, clientBlobs, uploads, held, dir };
}

const png = (colour: string) => sharp({ create: { width: 16, height: 16, channels: 3, background: colour } }).png().toBuffer();

describe('pictures a request carries', () => {
  it('refused after they were stored: the bytes new to the store go, those there before stay, and nothing is recorded', async () => {
    const { clientBlobs, store, held } = setup();
    const before = await clientBlobs.put('g-other', Readable.from([await png('#111')]));
    const known = await clientBlobs.receive(Readable.from([await png('#111')]));
    const fresh = await clientBlobs.receive(Readable.from([await png('#222')]));
    const pictures = [
      { incoming: known, mediaType: await clientBlobs.judge(known, {}, true) },
      { incoming: fresh, mediaType: await clientBlobs.judge(fresh, {}, true) },
    ];
    const carried = clientBlobs.carry('g1', pictures);
    expect(held()).toEqual([before.digest]);
    const stored = await carried.store();
    expect(held()).toEqual([before.digest, fresh.digest].sort());
    await stored.refused();
    expect(held()).toEqual([before.digest]);
    expect(await store.blobs.getBlob(fresh.digest)).toBeNull();
    expect(await clientBlobs.storedBy(known.digest, 'g1')).toBe(false);
    expect(await clientBlobs.storedBy(known.digest, 'g-other')).toBe(true);
  });

  it('admitted: recorded as the lineage\'s, in the turn of the jobs', async () => {
    const { clientBlobs, store, commits, held } = setup();
    const incoming = await clientBlobs.receive(Readable.from([await png('#333')]));
    const carried = clientBlobs.carry('g1', [{ incoming, mediaType: await clientBlobs.judge(incoming, {}, true) }, { incoming, mediaType: 'image/png' }]);
    // The same picture twice (image and mask) is one digest, stored once.
    expect(carried.digests).toEqual([incoming.digest]);
    (await carried.store()).admitted();
    await commits.durable();
    expect(held()).toEqual([incoming.digest]);
    expect(await store.blobs.getBlob(incoming.digest)).toMatchObject({ mediaType: 'image/png' });
    expect(await clientBlobs.storedBy(incoming.digest, 'g1')).toBe(true);
  });

  it('another request storing the same bytes waits for the decision, and a refusal then leaves them to it', async () => {
    const { clientBlobs, held } = setup();
    const bytes = await png('#444');
    const incoming = await clientBlobs.receive(Readable.from([bytes]));
    const stored = await clientBlobs.carry('g1', [{ incoming, mediaType: await clientBlobs.judge(incoming, {}, true) }]).store();
    let putDone = false;
    const put = clientBlobs.put('g2', Readable.from([bytes])).then((answer) => {
      putDone = true;
      return answer;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(putDone).toBe(false);
    await stored.refused();
    expect((await put).digest).toBe(incoming.digest);
    expect(held()).toEqual([incoming.digest]);
    expect(await clientBlobs.storedBy(incoming.digest, 'g2')).toBe(true);
    expect(await clientBlobs.storedBy(incoming.digest, 'g1')).toBe(false);
  });

  it('a picture that does not decode is refused before it is stored, whatever it was declared as', async () => {
    const { clientBlobs, held, dir } = setup();
    const truncated = (await png('#555')).subarray(0, 40);
    expect((await meshRejection(clientBlobs.put('g1', Readable.from([truncated])))).code).toBe('IMAGE_REFUSED');
    const words = Buffer.from('not a picture at all');
    expect((await meshRejection(clientBlobs.put('g1', Readable.from([words]), { mediaType: 'image/png' }))).code).toBe('IMAGE_REFUSED');
    expect(held()).toEqual([]);
    expect(readdirSync(join(dir, 'blobs', 'incoming'))).toEqual([]);
  });
});

describe('resumable uploads', () => {
  it('one refused at completion is gone, bytes and record; a store failure leaves it to complete again', async () => {
    const { clientBlobs, uploads, held } = setup();
    const truncated = (await png('#666')).subarray(0, 60);
    const refused = await uploads.create('g1', null);
    await uploads.append(refused.id, 'g1', 0, Readable.from([truncated]));
    expect((await meshRejection(uploads.complete(refused.id, 'g1', (file) => clientBlobs.take('g1', file)))).code).toBe('IMAGE_REFUSED');
    expect((await meshRejection(uploads.state(refused.id, 'g1'))).code).toBe('NOT_FOUND');
    expect(held()).toEqual([]);

    const kept = await uploads.create('g1', null);
    await uploads.append(kept.id, 'g1', 0, Readable.from([Buffer.from('model bytes')]));
    await expect(uploads.complete(kept.id, 'g1', () => Promise.reject(new Error('the bucket is away')))).rejects.toThrow('the bucket is away');
    expect((await uploads.state(kept.id, 'g1')).offset).toBe('model bytes'.length);
    const stored = await uploads.complete(kept.id, 'g1', (file) => clientBlobs.take('g1', file));
    expect(held()).toEqual([stored.digest]);
  });

  it('abandoned ones are swept every hour while the orchestrator runs, not only at its start', async () => {
    const { uploads, clock } = setup();
    const old = await uploads.create('g1', null);
    await uploads.append(old.id, 'g1', 0, Readable.from([Buffer.from('half a file')]));
    const counts: number[] = [];
    uploads.sweepEvery(3600_000, 7 * 86_400_000, (count) => counts.push(count));
    // Hour after hour: each sweep arms the next once it is done.
    for (let hour = 1; hour <= 7 * 24 + 1; hour++) {
      clock.advance(3600_000);
      // A sweep reads and removes files (real I/O): the next hour is advanced only once it has been counted and re-armed.
      for (let waited = 0; counts.length < hour && waited < 5_000; waited++) await new Promise((resolve) => setTimeout(resolve, 1));
      await new Promise((resolve) => setImmediate(resolve));
      if (hour === 1) expect((await uploads.state(old.id, 'g1')).offset).toBe('half a file'.length);
    }
    uploads.close();
    // Younger than a week at every sweep but the last; gone at the first sweep after its week.
    expect(counts).toHaveLength(7 * 24 + 1);
    expect(counts.slice(0, -1).every((count) => count === 0)).toBe(true);
    expect(counts.at(-1)).toBe(1);
    expect((await meshRejection(uploads.state(old.id, 'g1'))).code).toBe('NOT_FOUND');
  });
});
