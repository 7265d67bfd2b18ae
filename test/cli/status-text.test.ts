import { describe, expect, it } from 'vitest';
import { capabilityLines, storageLine } from '../../src/cli/commands/status.js';
import type { HostView } from '../../src/protocol/index.js';

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
});
