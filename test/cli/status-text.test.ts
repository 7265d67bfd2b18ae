import { describe, expect, it } from 'vitest';
import { capabilityLines } from '../../src/cli/commands/status.js';
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
