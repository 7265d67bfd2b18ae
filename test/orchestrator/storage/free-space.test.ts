import { describe, expect, it } from 'vitest';
import { MeshError } from '../../../src/protocol/index.js';
import { FreeSpace, storageFullError, type FsStats } from '../../../src/orchestrator/storage/free-space.js';
import { nestsDeeperThan } from '../../../src/orchestrator/http/json-depth.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const MB = 1024 * 1024;

/** A filesystem whose free space the test sets, counting how often it is measured. */
function disk(freeMB: number) {
  const state = { freeMB, calls: 0, fail: false };
  const statfs = async (): Promise<FsStats> => {
    state.calls++;
    if (state.fail) throw Object.assign(new Error('gone'), { code: 'ENOENT' });
    return { bavail: state.freeMB * 256, bsize: 4096, blocks: 1000 * 256 };
  };
  return { state, statfs };
}

const refusal = async (admitted: Promise<void> | null): Promise<unknown> => {
  if (admitted === null) return null;
  try {
    await admitted;
    return null;
  } catch (error) {
    return error;
  }
};

describe('FreeSpace: the data folder\'s disk against its floor', () => {
  it('measures at most once a second on the hot path, and never makes a request wait while there is room', async () => {
    const clock = new FakeClock();
    const { state, statfs } = disk(900);
    const space = new FreeSpace({ path: '/data', minFreeBytes: 512 * MB, now: () => clock.now(), statfs });
    // The first request waits for the first measure (there is none yet); the next ones do not wait at all.
    expect(await refusal(space.admit())).toBeNull();
    expect(state.calls).toBe(1);
    for (let index = 0; index < 1000; index++) expect(space.admit()).toBeNull();
    expect(state.calls).toBe(1);
    // A second later: measured again in the background, this request still not waiting.
    clock.advance(1000);
    expect(space.admit()).toBeNull();
    expect(space.admit()).toBeNull();
    expect(state.calls).toBe(2);
  });

  it('below the floor refuses with STORAGE_FULL saying how much is free, and takes work again once space is back', async () => {
    const clock = new FakeClock();
    const { state, statfs } = disk(100);
    const changes: boolean[] = [];
    const space = new FreeSpace({ path: '/data', minFreeBytes: 512 * MB, now: () => clock.now(), statfs, onChange: (low) => changes.push(low) });
    const refused = await refusal(space.admit());
    expect(refused).toBeInstanceOf(MeshError);
    expect((refused as MeshError).code).toBe('STORAGE_FULL');
    expect((refused as MeshError).message).toContain('100 MB free of 1000 MB, below the floor of 512 MB (storage.minFreeMB)');
    // Within the second: refused from the last measure, without measuring.
    expect(await refusal(space.admit())).toBeInstanceOf(MeshError);
    expect(state.calls).toBe(1);
    expect(await space.view()).toMatchObject({ low: true, freeBytes: 100 * MB, minFreeBytes: 512 * MB, path: '/data' });
    state.freeMB = 800;
    clock.advance(1000);
    // Low and stale: the request waits for a fresh measure, and is taken.
    expect(await refusal(space.admit())).toBeNull();
    expect(changes).toEqual([true, false]);
    expect((await space.view()).low).toBe(false);
  });

  it('after a write met a full disk, the next request waits for a fresh measure', async () => {
    const clock = new FakeClock();
    const { state, statfs } = disk(900);
    const space = new FreeSpace({ path: '/data', minFreeBytes: 512 * MB, now: () => clock.now(), statfs });
    await space.admit();
    state.freeMB = 10;
    space.sawFull();
    expect(await refusal(space.admit())).toBeInstanceOf(MeshError);
    expect(state.calls).toBe(2);
  });

  it('a floor of 0 refuses nothing; a disk that cannot be measured refuses nothing and is asked again a second later', async () => {
    const clock = new FakeClock();
    const empty = disk(0);
    const off = new FreeSpace({ path: '/data', minFreeBytes: 0, now: () => clock.now(), statfs: empty.statfs });
    expect(await refusal(off.admit())).toBeNull();
    const broken = disk(0);
    broken.state.fail = true;
    const space = new FreeSpace({ path: '/data', minFreeBytes: 512 * MB, now: () => clock.now(), statfs: broken.statfs });
    expect(await refusal(space.admit())).toBeNull();
    expect(space.admit()).toBeNull();
    expect(broken.state.calls).toBe(1);
    expect((await space.view()).checkedAt).toBeNull();
    clock.advance(1000);
    await refusal(space.admit());
    expect(broken.state.calls).toBeGreaterThan(1);
  });

  it('storageFullError: ENOSPC, EDQUOT and SQLITE_FULL, on the error or its cause; nothing else', () => {
    for (const code of ['ENOSPC', 'EDQUOT', 'SQLITE_FULL']) {
      expect(storageFullError(Object.assign(new Error('x'), { code }))?.code).toBe('STORAGE_FULL');
      expect(storageFullError(new Error('wrapped', { cause: Object.assign(new Error('x'), { code }) }))?.code).toBe('STORAGE_FULL');
    }
    expect(storageFullError(Object.assign(new Error('x'), { code: 'EACCES' }))).toBeNull();
    expect(storageFullError(new MeshError('INTERNAL', { detail: 'x' }, { cause: Object.assign(new Error('x'), { code: 'ENOSPC' }) }))).toBeNull();
    expect(storageFullError('ENOSPC')).toBeNull();
  });
});

describe('nestsDeeperThan: JSON depth counted without recursion', () => {
  it('counts arrays and objects alike, the value itself as level 1', () => {
    expect(nestsDeeperThan(1, 0)).toBe(false);
    expect(nestsDeeperThan([], 1)).toBe(false);
    expect(nestsDeeperThan([[]], 1)).toBe(true);
    expect(nestsDeeperThan({ a: [{ b: 1 }] }, 3)).toBe(false);
    expect(nestsDeeperThan({ a: [{ b: [] }] }, 3)).toBe(true);
    expect(nestsDeeperThan({ wide: Array.from({ length: 10_000 }, () => [1, 2]) }, 3)).toBe(false);
  });

  it('a million levels deep: answered, no stack overflow', () => {
    const levels = 1_000_000;
    const deep = JSON.parse(`${'['.repeat(levels)}${']'.repeat(levels)}`) as unknown;
    expect(nestsDeeperThan(deep, 64)).toBe(true);
    expect(nestsDeeperThan(deep, levels)).toBe(false);
  });
});
