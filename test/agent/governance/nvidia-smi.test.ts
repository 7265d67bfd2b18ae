import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { findNvidiaSmi, nvidiaSmiCandidates } from '../../../src/agent/governance/executable.js';
import { tempDir } from '../../helpers/mesh.js';

describe('nvidia-smi: where the driver put it', () => {
  it('on Windows: PATH, then System32, then NVSMI under Program Files, from the environment in any case', () => {
    expect(nvidiaSmiCandidates({ SystemRoot: 'D:\\Win', ProgramFiles: 'D:\\Apps' }, 'win32')).toEqual([
      'nvidia-smi', 'D:\\Win\\System32\\nvidia-smi.exe', 'D:\\Apps\\NVIDIA Corporation\\NVSMI\\nvidia-smi.exe',
    ]);
    expect(nvidiaSmiCandidates({}, 'win32')).toEqual([
      'nvidia-smi', 'C:\\Windows\\System32\\nvidia-smi.exe', 'C:\\Program Files\\NVIDIA Corporation\\NVSMI\\nvidia-smi.exe',
    ]);
    expect(nvidiaSmiCandidates({}, 'linux')).toEqual(['nvidia-smi']);
  });

  it('found on PATH as a full path; none anywhere: the bare name, which then fails and leaves the CPU as the device', () => {
    const dir = join(tempDir(), 'driver bin');
    mkdirSync(dir, { recursive: true });
    const tool = join(dir, 'nvidia-smi');
    writeFileSync(tool, '#!/bin/sh\nexit 0\n');
    chmodSync(tool, 0o755);
    expect(findNvidiaSmi({ PATH: `/nonexistent:${dir}` }, 'linux')).toBe(tool);
    expect(findNvidiaSmi({ PATH: '/nonexistent' }, 'linux')).toBe('nvidia-smi');
  });
});
