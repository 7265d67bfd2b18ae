import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../../src/agent/devices.js';
import type { LoadedModel } from '../../../../src/agent/core/engine.js';
import { OnnxEngine, workerEnv } from '../../../../src/agent/engines/onnx/engine.js';
import { executionProviders, providerFor } from '../../../../src/agent/engines/onnx/providers.js';
import { Supervisor } from '../../../../src/agent/governance/supervisor.js';
import { builtinModel, MLP_INPUT_DIM } from '../../../../src/builtin-models/index.js';
import type { ModelManifest } from '../../../../src/protocol/index.js';
import { tempDir } from '../../../helpers/mesh.js';
import { externalDataModel } from '../../../helpers/onnx-external.js';
import { engineContract } from '../../engine-contract.js';

const dir = tempDir();
mkdirSync(dir, { recursive: true });

function fixture(name: 'gen' | 'mlp'): { manifest: ModelManifest; path: string } {
  const model = builtinModel(name)!;
  const path = join(dir, `${name}.onnx`);
  writeFileSync(path, model.bytes);
  const params: Record<string, number> = name === 'gen' ? { defaultSteps: 6 } : { inputDim: MLP_INPUT_DIM, outputDim: 16 };
  return {
    path,
    manifest: {
      name, version: model.version, engine: 'onnx', digest: model.digest,
      bytes: model.bytes.length, memoryMB: model.memoryMB, jobTypes: model.jobTypes, params,
      settings: { pipeline: name === 'gen' ? 'cppn-image' : 'tensor' },
    },
  };
}

const supervisor = new Supervisor(pino({ level: 'silent' }));
afterAll(() => supervisor.stopAll());

const genJobs = (n: number, size: number, steps: number) =>
  Array.from({ length: n }, (_, i) => ({ id: `job${i}`, input: { prompt: `contract ${i}`, seed: i, width: size, height: size, steps } }));

engineContract('onnx', {
  engine: () => new OnnxEngine(supervisor),
  model: () => fixture('gen'),
  jobs: (n) => genJobs(n, 32, 3),
  // Large enough that a cancel sent after the first step arrives before the last.
  slowJobs: (n) => genJobs(n, 192, 6),
  // One fused pass needs one shape: a batch of two sizes is refused.
  invalidBatch: () => [genJobs(1, 32, 3)[0]!, { id: 'other-size', input: { prompt: 'x', seed: 1, width: 64, height: 64, steps: 3 } }],
  progress: { total: 3, everyStep: true },
  processes: () => supervisor.count,
  pids: () => supervisor.pids(),
  crashCode: 'ENGINE_CRASHED',
  measuresMemory: true,
  verifiesBytes: true,
  ownsProcesses: true,
});

describe('onnx engine: fused batches', () => {
  it('a batch of n run as one pass equals n single runs (tensor model, random inputs)', async () => {
    const engine = new OnnxEngine(supervisor);
    const { manifest, path } = fixture('mlp');
    const loaded = await engine.load(manifest, path, cpuDevice(512));
    const jobs = Array.from({ length: 8 }, (_, i) => ({ id: `t${i}`, input: { x: Array.from({ length: MLP_INPUT_DIM }, () => Math.random() * 4 - 2) } }));
    const { outputs: batched } = await loaded.run(jobs, () => {});
    for (const [index, job] of jobs.entries()) {
      const { outputs: [single] } = await loaded.run([job], () => {});
      const a = (batched[index] as { result: { y: number[] } }).result.y;
      const b = (single as { result: { y: number[] } }).result.y;
      expect(a).toHaveLength(16);
      a.forEach((value, k) => expect(value).toBeCloseTo(b[k]!, 4));
    }
    await loaded.unload();
  });

  it('a session capped at one thread (settings.threads) computes what the default one does; a bad cap is refused by name', async () => {
    const engine = new OnnxEngine(supervisor);
    const { manifest, path } = fixture('mlp');
    const jobs = Array.from({ length: 4 }, (_, i) => ({ id: `th${i}`, input: { x: Array.from({ length: MLP_INPUT_DIM }, (_, k) => Math.sin(i + k)) } }));
    const results: number[][][] = [];
    for (const [name, settings] of [['mlp-default', manifest.settings], ['mlp-one-thread', { ...manifest.settings, threads: 1 }]] as const) {
      const loaded = await engine.load({ ...manifest, name, settings }, path, cpuDevice(512));
      results.push((await loaded.run(jobs, () => {})).outputs.map((output) => (output as { result: { y: number[] } }).result.y));
      await loaded.unload();
    }
    results[1]!.flat().forEach((value, k) => expect(value).toBeCloseTo(results[0]!.flat()[k]!, 5));
    await expect(engine.load({ ...manifest, name: 'mlp-zero', settings: { ...manifest.settings, threads: 0 } }, path, cpuDevice(512))).rejects.toThrow(/threads/);
  });

  it('a model whose settings say process: agent runs in the agent\'s own process: no worker, the same results, a wrong file refused, unloaded and loaded again', async () => {
    const engine = new OnnxEngine(supervisor);
    const { manifest, path } = fixture('mlp');
    const jobs = Array.from({ length: 5 }, (_, i) => ({ id: `in${i}`, input: { x: Array.from({ length: MLP_INPUT_DIM }, (_, k) => Math.cos(i * k)) } }));
    const outputsOf = async (loaded: LoadedModel) => (await loaded.run(jobs, () => {})).outputs.map((output) => (output as { result: { y: number[] } }).result.y);
    const before = supervisor.count;
    const inAgent = await engine.load({ ...manifest, name: 'mlp-in-agent', settings: { ...manifest.settings, process: 'agent' } }, path, cpuDevice(512));
    expect(supervisor.count).toBe(before); // nothing forked
    const here = await outputsOf(inAgent);
    const inWorker = await engine.load({ ...manifest, name: 'mlp-in-worker' }, path, cpuDevice(512));
    expect(supervisor.count).toBe(before + 1);
    const there = await outputsOf(inWorker);
    here.forEach((row, index) => row.forEach((value, k) => expect(value).toBeCloseTo(there[index]![k]!, 5)));
    await inWorker.unload();
    // Its bytes are verified as a worker's are: a file that is not the manifest's is refused, and the agent goes on.
    const wrong = join(dir, 'not-mlp.onnx');
    writeFileSync(wrong, Buffer.from('not the model'));
    await expect(engine.load({ ...manifest, name: 'mlp-wrong', settings: { ...manifest.settings, process: 'agent' } }, wrong, cpuDevice(512)))
      .rejects.toMatchObject({ code: 'INTEGRITY_FAILED' });
    await inAgent.unload();
    const again = await engine.load({ ...manifest, name: 'mlp-in-agent', settings: { ...manifest.settings, process: 'agent' } }, path, cpuDevice(512));
    expect(await outputsOf(again)).toEqual(here);
    await engine.close();
    expect(supervisor.count).toBe(before);
  });

  it('a batch of generator jobs gives each job the image it would get alone', async () => {
    const engine = new OnnxEngine(supervisor);
    const { manifest, path } = fixture('gen');
    const loaded = await engine.load(manifest, path, cpuDevice(512));
    const jobs = ['amber', 'teal', 'violet'].map((prompt, i) => ({ id: prompt, input: { prompt, seed: 40 + i, width: 48, height: 48, steps: 4 } }));
    const { outputs: batched } = await loaded.run(jobs, () => {});
    for (const [index, job] of jobs.entries()) {
      const { outputs: [single] } = await loaded.run([job], () => {});
      const a = batched[index] as { ok: true; files: { bytes: Uint8Array }[] };
      const b = single as { ok: true; files: { bytes: Uint8Array }[] };
      expect(a.ok && b.ok).toBe(true);
      // PNGs of the same pixels are the same bytes (float differences of a fused pass would show as pixel differences).
      expect(Buffer.from(a.files[0]!.bytes).equals(Buffer.from(b.files[0]!.bytes))).toBe(true);
    }
    await loaded.unload();
  });
});

describe('onnx engine: execution providers', () => {
  it('each platform\'s accelerator: CUDA on Linux, DirectML on Windows, CoreML for a Mac\'s one device, else the CPU', () => {
    expect(providerFor({ kind: 'gpu' }, 'linux')).toBe('cuda');
    expect(providerFor({ kind: 'gpu' }, 'win32')).toBe('dml');
    expect(providerFor({ kind: 'cpu' }, 'darwin')).toBe('coreml');
    expect(providerFor({ kind: 'cpu' }, 'linux')).toBe('cpu');
    expect(providerFor({ kind: 'cpu' }, 'win32')).toBe('cpu');
    expect(executionProviders('dml', 1)).toEqual([{ name: 'dml', deviceId: 1 }, 'cpu']);
    expect(executionProviders('coreml', 0)).toEqual([{ name: 'coreml' }, 'cpu']);
  });

  it('a GPU device (mocked: this machine has none) whose provider this build lacks loads on the CPU and computes what the CPU does', async () => {
    const engine = new OnnxEngine(supervisor);
    const { manifest, path } = fixture('mlp');
    const gpu = { id: 'gpu0', kind: 'gpu' as const, name: 'stand-in GPU', memoryTotalMB: 8192, budgetMB: 4096, usedMB: 0 };
    const jobs = [{ id: 'p0', input: { x: Array.from({ length: MLP_INPUT_DIM }, (_, k) => Math.cos(k)) } }];
    const onGpu = await engine.load({ ...manifest, name: 'mlp-gpu' }, path, gpu);
    expect(onGpu.accelerator).toBe('cpu');
    const onCpu = await engine.load({ ...manifest, name: 'mlp-cpu' }, path, cpuDevice(512));
    expect(onCpu.accelerator).toBe('cpu');
    const [a] = (await onGpu.run(jobs, () => {})).outputs as unknown as [{ result: { y: number[] } }];
    const [b] = (await onCpu.run(jobs, () => {})).outputs as unknown as [{ result: { y: number[] } }];
    expect(a.result.y).toHaveLength(16);
    a.result.y.forEach((value, k) => expect(value).toBeCloseTo(b.result.y[k]!, 5));
    await onGpu.unload();
    await onCpu.unload();
  });
});

describe('onnx engine: memory, measured', () => {
  it('reports the memory a model took to load and the peak of each batch, which grows with the batch', async () => {
    const engine = new OnnxEngine(supervisor);
    const { manifest, path } = fixture('gen');
    const loaded = await engine.load(manifest, path, cpuDevice(4096));
    const job = (side: number, n: number) => Array.from({ length: n }, (_, i) => ({ id: `m${side}-${i}`, input: { prompt: 'memory', seed: i, width: side, height: side, steps: 2 } }));
    const small = (await loaded.run(job(64, 1), () => {})).memory!;
    const large = (await loaded.run(job(512, 1), () => {})).memory!;
    const again = (await loaded.run(job(64, 1), () => {})).memory!;
    expect(small.peakMB).toBeGreaterThanOrEqual(loaded.memoryMB);
    // A 512x512 image needs [262144 pixels, 32] float activations per layer: well over 100 MB more than a 64x64 one.
    expect(large.peakMB).toBeGreaterThan(small.peakMB + 100);
    // onnxruntime's CPU arena keeps what the large batch grew: the model holds it until it is unloaded.
    expect(large.residentMB).toBeGreaterThan(small.residentMB + 50);
    expect(again.residentMB).toBeGreaterThanOrEqual(large.residentMB - 20);
    // A batch no larger than the largest so far runs in the memory that one left: it is reported at its figures,
    // unmeasured (measuring costs every small job /proc reads, or two nvidia-smi runs on a GPU).
    expect(again).toEqual({ peakMB: large.peakMB, residentMB: large.residentMB });
    await loaded.unload();
  });
  it('a batch is reported at its full peak whatever ran before it on the load: nothing, itself cancelled, a batch that failed', async () => {
    const engine = new OnnxEngine(supervisor);
    const { manifest, path } = fixture('gen');
    const batch = (tag: string, side = 192, n = 4) => genJobs(n, side, 3).map((job) => ({ ...job, id: `${tag} ${job.id}` }));
    const befores: Record<string, (loaded: LoadedModel) => Promise<void>> = {
      nothing: async () => {},
      // Stopped before its first step, it peaks at about the load figure: the worker must not take that as the size's peak.
      'itself, cancelled': async (loaded) => {
        const jobs = batch('cancelled');
        loaded.cancel(jobs.map((job) => job.id));
        const { outputs } = await loaded.run(jobs, () => {});
        expect(outputs.every((output) => !output.ok && output.code === 'CANCELLED')).toBe(true);
      },
      // Larger, refused before it ran (two shapes): neither its size nor its open measuring window may stay behind.
      'a larger batch that failed': async (loaded) => {
        await expect(loaded.run([...batch('failed', 192, 3), ...batch('failed other', 320, 1)], () => {})).rejects.toThrow(/share width/);
      },
    };
    for (const [before, run] of Object.entries(befores)) {
      const loaded = await engine.load(manifest, path, cpuDevice(4096));
      await run(loaded);
      const first = (await loaded.run(batch('first'), () => {})).memory!;
      const again = (await loaded.run(batch('again'), () => {})).memory!;
      // 192×192×4 needs [147456 pixels, 32] float activations per layer: well over 100 MB more than the model's load.
      expect(first.peakMB - loaded.memoryMB, `after ${before}`).toBeGreaterThan(100);
      expect(first.peakMB, `after ${before}`).toBeGreaterThanOrEqual(first.residentMB);
      expect(again.peakMB, `after ${before}`).toBeGreaterThanOrEqual(first.peakMB);
      await loaded.unload();
    }
  });
});

describe('onnx engine: leftovers', () => {
  it('an engine process leaves no /tmp/mat-debug-<pid>.log behind (onnxruntime telemetry is off)', async () => {
    const engine = new OnnxEngine(supervisor);
    const { manifest, path } = fixture('mlp');
    const before = new Set(supervisor.pids());
    const loaded = await engine.load(manifest, path, cpuDevice(512));
    const pid = supervisor.pids().find((candidate) => !before.has(candidate))!;
    (await loaded.run([{ id: 'leftover', input: { x: Array.from({ length: MLP_INPUT_DIM }, () => 1) } }], () => {})).outputs;
    expect(existsSync(`/tmp/mat-debug-${pid}.log`)).toBe(false);
    await loaded.unload();
    expect(supervisor.pids()).not.toContain(pid);
    expect(existsSync(`/tmp/mat-debug-${pid}.log`)).toBe(false);
  });

  it('an operator who sets ORT_DISABLE_TELEMETRY keeps their choice; the agent\'s grant is not passed on', () => {
    expect(workerEnv({ PATH: '/bin', GPUMESH_GRANT: 'secret', GPUMESH_DATABASE_URL: 'postgres://u:pw@db/mesh' })).toEqual({ PATH: '/bin', ORT_DISABLE_TELEMETRY: '1' });
    expect(workerEnv({ ORT_DISABLE_TELEMETRY: '0' }).ORT_DISABLE_TELEMETRY).toBe('0');
  });
});

describe('onnx engine: external data, checked at load', () => {
  const sha = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  const tensorManifest = (name: string, digest: string, extra: Partial<ModelManifest> = {}): ModelManifest => ({
    name, version: '1', engine: 'onnx', digest, bytes: 0, memoryMB: 64, jobTypes: ['tensor'], params: {},
    settings: { pipeline: 'tensors' }, inputs: [{ name: 'x', datatype: 'UINT8', shape: [4] }], outputs: [{ name: 'y', datatype: 'UINT8', shape: [4] }], ...extra,
  });
  const job = { id: 'x', input: { inputs: { x: { datatype: 'UINT8', shape: [4], data: [10, 10, 10, 10] } } } };

  it('a model of one file whose weights name a file of the host is refused before onnxruntime opens it, in a worker and in the agent\'s own process', async () => {
    // The agent's working directory holds what an attacker's model names (the data folder of `gpumesh up` holds the key).
    const secret = join(process.cwd(), `secret-${process.pid}.key`);
    writeFileSync(secret, Buffer.from([1, 2, 3, 4]));
    try {
      for (const location of [`secret-${process.pid}.key`, `./secret-${process.pid}.key`, `../${dir.split('/').pop()}/x`, secret]) {
        const bytes = externalDataModel(location);
        const path = join(dir, `sneaky-${createHash('sha1').update(location).digest('hex')}.onnx`);
        writeFileSync(path, bytes);
        for (const where of ['worker', 'agent'] as const) {
          const engine = new OnnxEngine(supervisor);
          await expect(engine.load(tensorManifest(`sneaky-${where}`, sha(bytes), { settings: { pipeline: 'tensors', process: where } }), path, cpuDevice(512)))
            .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false, message: expect.stringContaining(`initializer "w" keeps its data outside the file, at ${JSON.stringify(location)}, which is not a file of the model`) });
          await engine.close();
        }
      }
    } finally {
      rmSync(secret, { force: true });
    }
  });

  it('a model of several files reads its weights from its own data file, by name; a name outside its files is refused', async () => {
    const network = externalDataModel('weights.bin');
    const weights = Uint8Array.from([5, 6, 7, 8]);
    // Residency hands the engine each member under its own name, in a folder of the model's alone.
    const folder = join(dir, 'set');
    mkdirSync(folder, { recursive: true });
    writeFileSync(join(folder, 'model.onnx'), network);
    writeFileSync(join(folder, 'weights.bin'), weights);
    const files = { 'model.onnx': join(folder, 'model.onnx'), 'weights.bin': join(folder, 'weights.bin') };
    const members = { 'model.onnx': { digest: sha(network), bytes: network.length }, 'weights.bin': { digest: sha(weights), bytes: 4 } };
    const engine = new OnnxEngine(supervisor);
    const loaded = await engine.load(tensorManifest('two-files', 'sha256:' + '0'.repeat(64), { files: members }), files['model.onnx'], cpuDevice(512), files);
    const [output] = (await loaded.run([job], () => {})).outputs;
    expect(output).toMatchObject({ ok: true, result: { outputs: { y: { datatype: 'UINT8', shape: [4], data: [15, 16, 17, 18] } } } });
    await loaded.unload();

    const stray = externalDataModel('secret.key');
    writeFileSync(join(folder, 'stray.onnx'), stray);
    writeFileSync(join(folder, 'secret.key'), weights);
    await expect(engine.load(
      tensorManifest('stray', 'sha256:' + '1'.repeat(64), { files: { 'stray.onnx': { digest: sha(stray), bytes: stray.length }, 'weights.bin': members['weights.bin'] } }),
      join(folder, 'stray.onnx'), cpuDevice(512), { 'stray.onnx': join(folder, 'stray.onnx'), 'weights.bin': files['weights.bin'] },
    )).rejects.toMatchObject({ code: 'ENGINE_FAILED', message: expect.stringContaining('stray.onnx: initializer "w" keeps its data outside the file, at "secret.key", which is not a file of the model: only a file of the model itself may hold it (weights.bin)') });
    await engine.close();
  });
});

describe('onnx engine: PNG encoding', () => {
  it('both encoders (in the worker\'s thread for small pictures, libvips for large) write PNGs that decode to the pixels given', async () => {
    const { encodePng } = await import('../../../../src/agent/engines/onnx/png.js');
    const { default: sharp } = await import('sharp');
    for (const [width, height] of [[8, 8], [37, 5], [200, 150]] as const) {
      const rgb = Uint8Array.from({ length: width * height * 3 }, (_, k) => (k * 7919 + (k >> 5)) & 255);
      for (const inThreadPixels of [Infinity, 0]) {
        const png = await encodePng(rgb, width, height, inThreadPixels);
        const { data, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
        expect(info).toMatchObject({ width, height, channels: 3, format: 'raw' });
        expect(Buffer.from(data).equals(Buffer.from(rgb))).toBe(true);
      }
    }
  });
});
