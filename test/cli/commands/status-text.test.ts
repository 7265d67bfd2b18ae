import { describe, expect, it } from 'vitest';
import { capabilityLines, jobsLine, storageLine } from '../../../src/cli/commands/status.js';
import type { HostView } from '../../../src/protocol/api/index.js';

const host = (id: string, fields: Partial<HostView>): HostView => ({ id, unavailable: {}, tools: [], ...fields } as HostView);

describe('gpumesh status: what each host can and cannot serve', () => {
  it('says which ffmpeg a host encodes with, and "video: off — why" for one without', () => {
    expect(capabilityLines([
      host('gpu-box', { tools: [{ name: 'ffmpeg', path: '/work/node_modules/@ffmpeg-installer/linux-x64/ffmpeg', source: 'package', version: 'ffmpeg version N-47683' }] }),
      host('vm', { unavailable: { video: 'ffmpeg not found (none on PATH; no ffmpeg package for linux-riscv64)' } }),
      host('old', { unavailable: undefined, tools: undefined } as unknown as Partial<HostView>),
    ])).toEqual([
      'gpu-box  ffmpeg: /work/node_modules/@ffmpeg-installer/linux-x64/ffmpeg (package; ffmpeg version N-47683)',
      'vm       video: off — ffmpeg not found (none on PATH; no ffmpeg package for linux-riscv64)',
    ]);
  });
});

describe('gpumesh status: what the store holds', () => {
  it('counts the blobs and their bytes, says where, and how long finished jobs are kept', () => {
    const jobs = (retentionDays: number) => ({ retentionDays, counts: { succeeded: 3 } });
    expect(storageLine({ blobs: { location: '/srv/gpumesh/blobs', count: 1234, bytes: 2.5 * 1024 ** 3 }, jobs: jobs(30) }))
      .toBe('storage: 1,234 blobs, 2.5 GiB in /srv/gpumesh/blobs; finished jobs without results kept 30 days');
    expect(storageLine({ blobs: { location: 's3://bucket/gpumesh/', count: 1, bytes: 512 }, jobs: jobs(1) }))
      .toBe('storage: 1 blob, 512 B in s3://bucket/gpumesh/; finished jobs without results kept 1 day');
    expect(storageLine({ blobs: { location: '/data/blobs', count: 0, bytes: 0 }, jobs: jobs(0) })).toBe('storage: 0 blobs, 0 B in /data/blobs; every finished job kept');
  });

  it('says how much of the data folder\'s disk is free, and when it is below its floor what that stops', () => {
    const base = { blobs: { location: '/data/blobs', count: 2, bytes: 2048 }, jobs: { retentionDays: 30, counts: {} } };
    const disk = (freeBytes: number, low: boolean) => ({ path: '/data', freeBytes, totalBytes: 40 * 1024 ** 3, minFreeBytes: 512 * 1024 ** 2, low, checkedAt: '2026-01-01T00:00:00.000Z' });
    expect(storageLine({ ...base, disk: disk(10 * 1024 ** 3, false) }))
      .toBe('storage: 2 blobs, 2.0 KiB in /data/blobs; finished jobs without results kept 30 days; disk: 10.0 GiB free of 40.0 GiB');
    expect(storageLine({ ...base, disk: disk(100 * 1024 ** 2, true) })).toBe(
      'storage: 2 blobs, 2.0 KiB in /data/blobs; finished jobs without results kept 30 days; disk LOW: 100.0 MiB free of 40.0 GiB, below the floor of 512.0 MiB (storage.minFreeMB): new uploads, jobs and model adds are refused (STORAGE_FULL) until space is freed',
    );
    // Never measured (statfs failed): nothing to say about it.
    expect(storageLine({ ...base, disk: { ...disk(0, false), checkedAt: null } })).toBe('storage: 2 blobs, 2.0 KiB in /data/blobs; finished jobs without results kept 30 days');
  });
});

describe('gpumesh status: jobs by status', () => {
  it('lists jobs waiting for another job\'s output first, then in the order a job passes through its states', () => {
    expect(jobsLine({ succeeded: 40, queued: 3, waiting: 1, running: 2, failed: 1 })).toBe('jobs: waiting 1, queued 3, running 2, succeeded 40, failed 1');
    expect(jobsLine({})).toBe('jobs: none yet');
  });
});
