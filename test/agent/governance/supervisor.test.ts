import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../src/agent/devices.js';
import { OnnxEngine } from '../../../src/agent/engines/onnx/engine.js';
import { Supervisor } from '../../../src/agent/governance/supervisor.js';
import { builtinModel } from '../../../src/builtin-models/index.js';
import type { ModelManifest } from '../../../src/protocol/index.js';
import { tempDir } from '../../helpers/mesh.js';
import { cgroupFile, cgroupGovernor, expectNothingLeft, needsCgroups, silentLog } from './helpers.js';

const MB = 1024 * 1024;
const { governor, skip } = await cgroupGovernor('supervisor-test');
afterAll(() => governor.close());

const dir = tempDir();
const model = builtinModel('gen')!;
const modelPath = join(dir, 'gen.onnx');
writeFileSync(modelPath, model.bytes);
const manifest: ModelManifest = {
  name: 'gen', version: model.version, engine: 'onnx', digest: model.digest,
  bytes: model.bytes.length, memoryMB: model.memoryMB, jobTypes: model.jobTypes, params: { defaultSteps: 3 }, settings: { pipeline: 'cppn-image' },
};

/** The one live cgroup under the governor's parents that holds `pid`. */
const cgroupOf = (pid: number): string[] => {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
  return governor.cgroupParents.map((parent) => {
    const leaf = lines.map((line) => line.split(':')[2] ?? '').find((path) => path.includes(`/${parent.split('/').at(-1)}/`))!;
    return join(parent, leaf.split('/').at(-1)!);
  });
};

describe('the ONNX worker under governance (Supervisor.fork, callers unchanged)', () => {
  it.skipIf(skip)(needsCgroups('runs in its own cgroup with the configured limits, serves batches, and leaves nothing when unloaded', skip), async () => {
    const supervisor = new Supervisor(silentLog, governor, { memoryLimitMB: 1024, pidsLimit: 256, cpuWeight: 200 });
    const engine = new OnnxEngine(supervisor);
    const loaded = await engine.load(manifest, modelPath, cpuDevice(1024));
    const [pid] = supervisor.pids();
    const paths = cgroupOf(pid!);
    expect(cgroupFile(paths, 'cgroup.procs').split('\n').map(Number)).toContain(pid);
    expect(cgroupFile(paths, 'pids.max')).toBe('256');
    if (governor.cgroupVersion === 1) {
      expect(Number(cgroupFile(paths, 'memory.limit_in_bytes'))).toBe(1024 * MB);
      expect(cgroupFile(paths, 'cpu.shares')).toBe('2048');
    } else {
      expect(Number(cgroupFile(paths, 'memory.max'))).toBe(1024 * MB);
      expect(cgroupFile(paths, 'cpu.weight')).toBe('200');
    }
    const outputs = (await loaded.run([{ id: 'j1', input: { prompt: 'governed', seed: 1, width: 32, height: 32, steps: 3 } }], () => {})).outputs;
    expect(outputs[0]!.ok).toBe(true);
    await loaded.unload();
    expect(supervisor.count).toBe(0);
    await expectNothingLeft(pid!, paths);
  });

  it.skipIf(skip)(needsCgroups('a worker killed by its memory limit fails the request with ENGINE_OOM, not ENGINE_CRASHED', skip), async () => {
    const supervisor = new Supervisor(silentLog, governor, { memoryLimitMB: 24 });
    const engine = new OnnxEngine(supervisor);
    await expect(engine.load(manifest, modelPath, cpuDevice(1024)))
      .rejects.toMatchObject({ code: 'ENGINE_OOM', message: expect.stringMatching(/onnx\/cpu \(pid \d+\) .*memory limit of 24 MB/) });
    await engine.close();
  });
});
