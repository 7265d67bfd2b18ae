import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cpuDevice, detectDevices, parseNvidiaSmi } from '../../src/agent/devices.js';
import { tempDir } from '../helpers/mesh.js';

describe('devices', () => {
  it('parses nvidia-smi CSV into GPUs with budgets', () => {
    const devices = parseNvidiaSmi('0, NVIDIA GeForce RTX 5080 Laptop GPU, 16303, 412\n1, NVIDIA GeForce RTX 3090, 24576, 0\n', 0.9);
    expect(devices).toEqual([
      { id: 'gpu0', kind: 'gpu', name: 'NVIDIA GeForce RTX 5080 Laptop GPU', memoryTotalMB: 16303, budgetMB: 14672, usedMB: 412 },
      { id: 'gpu1', kind: 'gpu', name: 'NVIDIA GeForce RTX 3090', memoryTotalMB: 24576, budgetMB: 22118, usedMB: 0 },
    ]);
  });

  it('uses GPUs when nvidia-smi answers (mocked nvidia-smi: no GPU on this machine)', async () => {
    const dir = tempDir();
    const fake = join(dir, 'nvidia-smi');
    writeFileSync(fake, '#!/bin/sh\necho "0, NVIDIA GeForce RTX 3090, 24576, 1024"\n');
    chmodSync(fake, 0o755);
    const devices = await detectDevices({ nvidiaSmi: fake, gpuBudgetFraction: 0.5 });
    expect(devices).toEqual([{ id: 'gpu0', kind: 'gpu', name: 'NVIDIA GeForce RTX 3090', memoryTotalMB: 24576, budgetMB: 12288, usedMB: 1024 }]);
  });

  it('falls back to the CPU with its budget when there is no nvidia-smi or it fails', async () => {
    const missing = await detectDevices({ nvidiaSmi: '/nonexistent/nvidia-smi', cpuBudgetMB: 2048 });
    expect(missing).toHaveLength(1);
    expect(missing[0]).toMatchObject({ id: 'cpu', kind: 'cpu', budgetMB: 2048 });
    const dir = tempDir();
    const broken = join(dir, 'nvidia-smi');
    writeFileSync(broken, '#!/bin/sh\necho "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver" >&2\nexit 9\n');
    chmodSync(broken, 0o755);
    expect((await detectDevices({ nvidiaSmi: broken }))[0]!.kind).toBe('cpu');
    expect(cpuDevice().budgetMB).toBeLessThanOrEqual(8192);
  });
});
