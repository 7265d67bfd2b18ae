import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { HostPolicy, type HostPolicyDeps } from '../../../src/agent/host-policy/host-policy.js';
import type { Device } from '../../../src/protocol/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { ROOT, tempDir, waitFor } from '../../helpers/mesh.js';

/** The nvidia-smi stand-in (this machine has no GPU), answering from a scenario file the test writes. */
const NVIDIA_SMI = join(ROOT, 'test/fixtures/nvidia/nvidia-smi.mjs');
const GPU: Device = { id: 'gpu0', kind: 'gpu', name: 'Stand-in GPU', memoryTotalMB: 16_303, budgetMB: 12_000, usedMB: 0 };
const CPU: Device = { id: 'cpu', kind: 'cpu', name: 'CPU', memoryTotalMB: 8000, budgetMB: 4000, usedMB: 0 };

const scenario = (processes: unknown[]): string => {
  const file = join(tempDir(), 'scenario.json');
  writeFileSync(file, JSON.stringify({ gpus: [{ index: 0, uuid: 'GPU-0', memoryTotalMB: 16_303, memoryUsedMB: 400, temperatureC: 61, powerW: 80, powerLimitW: 175 }], processes }));
  return file;
};

/** A policy over stand-in parts that write down what the host was asked to do. */
function policy(options: Partial<Pick<HostPolicyDeps, 'policies' | 'devices'>> = {}) {
  const clock = new FakeClock(Date.parse('2026-12-07T12:00:00Z'));
  const did: string[] = [];
  const handedBack: string[] = [];
  const host = new HostPolicy({
    host: 'box', policies: options.policies ?? {}, devices: options.devices ?? [GPU], nvidiaSmi: NVIDIA_SMI, clock, log: pino({ level: 'silent' }),
    batches: { size: 0, handBack: (error) => handedBack.push(error.code) },
    residency: { resident: () => [], unloadAll: async () => {}, usedMB: () => 0 },
    ownPids: () => new Set([process.pid]),
    idle: () => true,
    changed: () => did.push('changed'),
    sleep: async () => { did.push('sleep'); },
    wake: () => did.push('wake'),
  });
  return { clock, host, did, handedBack };
}

describe('the owner\'s say over a host, wired (HostPolicy)', () => {
  const saved = process.env.FAKE_NVIDIA_SMI_SCENARIO;
  afterEach(() => {
    if (saved === undefined) delete process.env.FAKE_NVIDIA_SMI_SCENARIO;
    else process.env.FAKE_NVIDIA_SMI_SCENARIO = saved;
  });

  it('a CPU host without policies reads nothing and is never away', async () => {
    const { host, did } = policy({ devices: [CPU] });
    expect(host.watching).toBe(false);
    await host.start();
    expect(host.away).toBeNull();
    expect(host.reading('cpu')).toBeUndefined();
    expect(host.energyJ('cpu', Date.now())).toBeNull();
    expect(did).toEqual([]);
  });

  it('a GPU host reads its GPUs; with an owner policy, a game on the GPU makes it yield and refuse work HOST_AWAY', async () => {
    process.env.FAKE_NVIDIA_SMI_SCENARIO = scenario([{ gpu: 0, pid: 4242, name: 'game.exe', usedMB: 6200 }]);
    const { host, did } = policy({ policies: { owner: { gpuMemoryMB: 1024, checkEveryS: 10, running: 'finish', unloadWithinS: 30, quietS: 300 } } });
    expect(host.watching).toBe(true);
    await host.start();
    host.stop();
    expect(host.reading('gpu0')).toMatchObject({ temperatureC: 61, powerW: 80, powerLimitW: 175 });
    expect(host.away).toMatchObject({ state: 'yielded', reason: 'game.exe holds 6.1 GB on gpu0' });
    expect(did).toEqual(['changed']);
    const refusal = host.refusal(host.away!);
    expect(refusal).toMatchObject({ code: 'HOST_AWAY', retryable: true });
    expect(refusal.message).toContain('game.exe holds 6.1 GB on gpu0');
  });

  it('with a sleep policy, an idle host says it is asleep, sleeps through its owner\'s command, and wakes', async () => {
    process.env.FAKE_NVIDIA_SMI_SCENARIO = scenario([]);
    const { clock, host, did } = policy({ policies: { sleep: { afterIdleS: 1, command: [process.execPath, '-e', 'setTimeout(() => {}, 300)'] } } });
    await host.start();
    expect(host.away).toBeNull();
    clock.advance(5000); // the next check: idle for 5 s, past afterIdleS
    await waitFor(() => host.away?.state === 'asleep', { what: 'the host to fall asleep' });
    expect(host.away?.reason).toBe('asleep after 1 s without work (sleep.afterIdleS)');
    await waitFor(() => did.includes('wake'), { what: 'the sleep command to end' });
    host.stop();
    expect(did).toEqual(['changed', 'sleep', 'wake']);
    expect(host.away).toBeNull();
  });
});
