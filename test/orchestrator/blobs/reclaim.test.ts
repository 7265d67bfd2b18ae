import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DigestLocks } from '../../../src/orchestrator/blobs/digest-locks.js';
import { InputImages } from '../../../src/orchestrator/blobs/input-images.js';
import { LocalBlobStore } from '../../../src/orchestrator/blobs/local-blob-store.js';
import { BlobReclaimer } from '../../../src/orchestrator/blobs/reclaim.js';
import { SqliteStore } from '../../../src/orchestrator/store/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { tempDirsPerTest } from '../../helpers/mesh.js';

/**
 * Giving bytes back, on a real folder and an in-memory SQLite: bytes nothing names go with their record; bytes a row
 * or a model names stay; and a writer holding a digest's lock (an output arriving) is waited for, so what it records
 * meanwhile counts.
 */
const newDir = tempDirsPerTest();

function setup() {
  const dir = newDir();
  const store = new SqliteStore(':memory:');
  const { commits } = store;
  const blobs = new LocalBlobStore(join(dir, 'blobs'));
  const locks = new DigestLocks();
  const modelFiles = new Set<string>();
  const reclaimer = new BlobReclaimer({ store, commits, blobs, locks, pictures: new InputImages({ store, commits, clock: new FakeClock(1), blobs }), modelFile: (digest) => modelFiles.has(digest) });
  const put = async (text: string): Promise<string> => {
    const { digest, bytes } = await blobs.putBytes(Buffer.from(text));
    commits.write(() => store.blobs.recordBlob({ digest, bytes, mediaType: 'text/plain' }, 1));
    return digest;
  };
  return { store, commits, blobs, locks, reclaimer, put, modelFiles };
}

describe('BlobReclaimer', () => {
  it('gives back bytes nothing names, with their record and a picture’s verdict; bytes a row or a model names stay', async () => {
    const { store, commits, blobs, reclaimer, put } = setup();
    const free = await put('nothing names me');
    const uploaded = await put('an output uploaded for a running job');
    const client = await put('a client stored me');
    const input = await put('a job starts from me');
    commits.write(() => {
      store.blobs.recordUpload('j_1', uploaded, 1);
      store.clientBlobs.recordClientBlob(client, 'g1', 1);
      store.inputImages.recordJobInput(input, 'j_2');
      store.inputImages.recordVerdict(free, { ok: true, format: 'png', width: 1, height: 1 }, 1);
    });
    expect(await reclaimer.release([free, uploaded, client, input, free])).toEqual({ freed: [free], freedBytes: 'nothing names me'.length });
    expect(await blobs.has(free)).toBe(false);
    expect(await store.blobs.getBlob(free)).toBeNull();
    expect(await store.inputImages.verdictOf(free)).toBeUndefined(); // admission finds no picture there
    for (const digest of [uploaded, client, input]) expect(await blobs.has(digest)).toBe(true);
    // A digest neither stored nor recorded frees nothing.
    expect(await reclaimer.release([free])).toEqual({ freed: [], freedBytes: 0 });
  });

  it('keeps a model’s file', async () => {
    const { blobs, reclaimer, put, modelFiles } = setup();
    const file = await put('model weights');
    modelFiles.add(file);
    expect(await reclaimer.release([file])).toEqual({ freed: [], freedBytes: 0 });
    expect(await blobs.has(file)).toBe(true);
  });

  it('sweeps the blobs nothing names, a page at a time: a row or a model keeps one', async () => {
    const { store, commits, blobs, reclaimer, put, modelFiles } = setup();
    const orphans = await Promise.all(['one', 'two', 'three'].map((text) => put(`nothing names ${text}`)));
    const model = await put('weights');
    modelFiles.add(model);
    const client = await put('a client keeps me');
    commits.write(() => store.clientBlobs.recordClientBlob(client, 'g1', 1));
    const swept = await reclaimer.sweepUnnamed(2);
    expect(swept.freed.sort()).toEqual([...orphans].sort());
    for (const digest of orphans) expect(await blobs.has(digest)).toBe(false);
    for (const digest of [model, client]) expect(await blobs.has(digest)).toBe(true);
    expect(await reclaimer.sweepUnnamed(2)).toEqual({ freed: [], freedBytes: 0 });
  });

  it('waits for a writer holding the digest: an output recorded meanwhile keeps the bytes', async () => {
    const { store, commits, blobs, locks, reclaimer, put } = setup();
    const digest = await put('the same bytes, arriving again');
    const release = await locks.lock(digest); // an output of these bytes is being stored (JobOutputs.receive)
    const releasing = reclaimer.release([digest]);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await blobs.has(digest)).toBe(true);
    commits.write(() => store.blobs.recordUpload('j_3', digest, 2));
    release();
    expect(await releasing).toEqual({ freed: [], freedBytes: 0 });
    expect(await blobs.has(digest)).toBe(true);
    expect(locks.size).toBe(0);
  });
});

describe('DigestLocks', () => {
  it('takes overlapping sets in one order, so holders of the same digests in any order never wait on each other', async () => {
    const locks = new DigestLocks();
    const order: string[] = [];
    const hold = (name: string, digests: string[]) => locks.holding(digests, async () => {
      order.push(`${name} in`);
      await new Promise((resolve) => setTimeout(resolve, 5));
      order.push(`${name} out`);
    });
    await Promise.all([hold('a', ['sha256:1', 'sha256:2']), hold('b', ['sha256:2', 'sha256:1']), hold('c', ['sha256:3'])]);
    expect(order.indexOf('b in')).toBeGreaterThan(order.indexOf('a out'));
    expect(order.indexOf('c in')).toBeLessThan(order.indexOf('a out'));
    expect(locks.size).toBe(0);
  });
});
