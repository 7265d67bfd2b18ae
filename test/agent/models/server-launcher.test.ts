import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../src/agent/devices.js';
import type { EngineJob, LoadedModel } from '../../../src/agent/core/engine.js';
import { SdcppEngine } from '../../../src/agent/engines/sdcpp/index.js';
import { ServerLauncher } from '../../../src/agent/models/server-launcher.js';
import type { ModelManifest } from '../../../src/protocol/index.js';
import { ROOT, tempDir, waitFor, TSX_LOADER } from '../../helpers/mesh.js';
import { cgroupFile, cgroupGovernor, expectNothingLeft, needsCgroups, silentLog } from '../governance/helpers.js';

/**
 * The agent starting the servers its models name, for real: the sd.cpp stand-in (a real process that speaks
 * sd-server's API) started from a command template under the agent's governance, stopped on unload.
 */
const { governor, skip } = await cgroupGovernor('server-launcher-test');
const dir = tempDir();
const launcher = new ServerLauncher({ governor, log: silentLog, dataDir: dir, engineLimits: { sdcpp: { memoryLimitMB: 400 } } });
const engine = new SdcppEngine({ endpoints: launcher.provider, log: silentLog });
afterAll(async () => {
  await engine.close();
  await launcher.stopAll();
  await governor.close();
});

const STANDIN = `'${process.execPath}' --import ${TSX_LOADER} '${join(ROOT, 'test/fixtures/standins/sdcpp-standin.ts')}' --port \${PORT}`;
const weights = join(dir, 'weights.gguf');
writeFileSync(weights, 'stand-in weights');

function manifest(settings: Record<string, unknown>): ModelManifest {
  return {
    name: 'sd', version: '1', engine: 'sdcpp', digest: `sha256:${'0'.repeat(64)}`, file: true, bytes: 16, memoryMB: 64, jobTypes: ['image'], params: {},
    settings: { readiness: { http: '/sdcpp/v1/capabilities', timeoutMs: 30_000, intervalMs: 50 }, stopGraceMs: 2000, ...settings },
  };
}

const job = (id: string, prompt = `a lighthouse ${id}`, steps = 2): EngineJob => ({ id, input: { prompt, seed: 7, width: 64, height: 64, steps } });
const cmdline = (pid: number): string => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');

describe('servers the agent starts from a model\'s command template', () => {
  it('starts it (${PORT}, ${MODEL_PATH}), waits for readiness, runs a batch; the unload stops it and leaves nothing', async () => {
    const loaded = await engine.load(manifest({ command: `${STANDIN} --model \${MODEL_PATH} --step-ms 10` }), weights, cpuDevice(2048));
    const [server] = launcher.servers();
    expect(server!.name).toBe('sdcpp/sd');
    expect(cmdline(server!.pid)).toContain(`--model ${weights}`);
    expect(cmdline(server!.pid)).toContain(`--port ${new URL(server!.url).port}`);
    if (!skip) expect(server!.cgroupPaths.length).toBeGreaterThan(0);
    // The load says how long the server took to spawn and to pass its readiness check (a cold start's phases).
    expect(loaded.startup).toMatchObject({ spawnMs: expect.any(Number), readyMs: expect.any(Number) });
    expect(loaded.startup!.readyMs).toBeGreaterThan(0);
    const { outputs } = await loaded.run([job('a'), job('b')], () => {});
    expect(outputs.map((output) => output.ok)).toEqual([true, true]);
    await loaded.unload();
    expect(launcher.servers()).toEqual([]);
    await expectNothingLeft(server!.pid, server!.cgroupPaths);
  });

  it('a server killed mid-batch: the batch fails with ENGINE_CRASHED and exited says why', async () => {
    const loaded = await engine.load(manifest({ command: `${STANDIN} --step-ms 100` }), null, cpuDevice(2048));
    const [server] = launcher.servers();
    const steps: number[] = [];
    const run = loaded.run([job('long', 'a long one', 30)], (progress) => steps.push(progress.step));
    await waitFor(() => steps.length > 0, { what: 'the first step' });
    process.kill(server!.pid, 'SIGKILL');
    await expect(run).rejects.toMatchObject({ code: 'ENGINE_CRASHED', retryable: true, message: expect.stringMatching(/sdcpp\/sd \(pid \d+\) was killed by SIGKILL/) });
    expect(await loaded.exited).toMatch(/was killed by SIGKILL/);
    await loaded.unload();
    await expectNothingLeft(server!.pid, server!.cgroupPaths);
  });

  it(needsCgroups('a server the kernel kills at its cgroup memory limit: ENGINE_OOM naming the limit (the host ceiling for the engine)', skip), async () => {
    if (skip) return;
    const loaded: LoadedModel = await engine.load(manifest({ command: `${STANDIN} --step-ms 50 --hog-prompt HOG`, memoryLimitMB: 2000 }), null, cpuDevice(2048));
    const [server] = launcher.servers();
    // The model asked for 2000 MB; the host's ceiling for sdcpp servers (400 MB) wins.
    expect(cgroupFile(server!.cgroupPaths, governor.cgroupVersion === 2 ? 'memory.max' : 'memory.limit_in_bytes')).toBe(String(400 * 1024 * 1024));
    await expect(loaded.run([job('hog', 'HOG an enormous image', 30)], () => {}))
      .rejects.toMatchObject({ code: 'ENGINE_OOM', message: expect.stringMatching(/exceeded its cgroup memory limit of 400 MB/) });
    expect(await loaded.exited).toMatch(/OOM killer/);
    await loaded.unload();
    await expectNothingLeft(server!.pid, server!.cgroupPaths);
  });

  it('a server program this host does not have fails the load retryably (another host may have it); a bad template does not', async () => {
    await expect(engine.load(manifest({ command: 'no-such-sd-server --port ${PORT}' }), null, cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: true, message: expect.stringMatching(/"no-such-sd-server": not found on PATH .* on this host$/) });
    await expect(engine.load(manifest({ command: `${STANDIN} --steps \${STEPS}` }), null, cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false, message: expect.stringMatching(/unknown variable \$\{STEPS\}/) });
    expect(launcher.servers()).toEqual([]);
  });

  it('a model that names neither a url nor a command fails its load, not retryably, saying so', async () => {
    await expect(engine.load(manifest({}), null, cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false, message: expect.stringMatching(/names neither settings\.url .* nor settings\.command/) });
    expect(launcher.servers()).toEqual([]);
  });
});
