import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../../src/agent/devices.js';
import { ComfyUiEngine } from '../../../../src/agent/engines/comfyui/index.js';
import type { EngineJob, JobOutput, Progress } from '../../../../src/agent/core/engine.js';
import type { Device, ModelManifest } from '../../../../src/protocol/index.js';
import { ROOT, tempDir, waitFor } from '../../../helpers/mesh.js';
import { startKnobStandIn, type StandIn } from '../../../helpers/knob-standins.js';
import { adapterContract } from '../../adapter-contract.js';

const WORKFLOW = join(ROOT, 'test/fixtures/comfyui/txt2img-api.json');
const INPUTS = {
  prompt: { node: '6', field: 'text' }, seed: { node: '3', field: 'seed' }, steps: { node: '3', field: 'steps' },
  width: { node: '5', field: 'width' }, height: { node: '5', field: 'height' }, negativePrompt: { node: '7', field: 'text' },
};
const DEFAULT_KNOBS = { stepMs: 10, failAtStep: null, dropSocketAtStep: null, previewEvery: 2, previewFormat: 'JPEG', dropConnections: null, busy: null };

interface StandInState { submitted: string[]; deleted: string[]; interrupts: (string | null)[]; frees: number; pending: string[]; running: string | null }

let comfy: StandIn;
beforeAll(async () => {
  comfy = await startKnobStandIn('comfyui');
});
afterAll(() => comfy?.stop());
beforeEach(() => comfy.knobs(DEFAULT_KNOBS));

function manifest(settings: Record<string, unknown> = {}, name = 'comfy-txt2img'): ModelManifest {
  return {
    name, version: '1', engine: 'comfyui', digest: `sha256:${'0'.repeat(64)}`, bytes: 0, memoryMB: 64,
    jobTypes: ['image'], params: {}, settings: { url: comfy.url, workflow: WORKFLOW, inputs: INPUTS, ...settings },
  };
}

const imageJob = (id: string, input: Partial<{ prompt: string; seed: number; width: number; height: number; steps: number }> = {}): EngineJob => ({
  id, input: { prompt: `a picture of ${id}`, seed: 7, width: 32, height: 24, steps: 4, ...input },
});

const pngOf = (output: JobOutput): Buffer => {
  if (!output.ok) throw new Error(`job ${output.jobId} failed: ${output.code} ${output.message}`);
  return Buffer.from(output.files[0]!.bytes);
};

adapterContract('comfyui (against comfyui-standin)', {
  engine: () => new ComfyUiEngine(),
  model: () => ({ manifest: manifest(), path: WORKFLOW }),
  jobs: (n) => Array.from({ length: n }, (_, i) => imageJob(`job${i}`, { seed: i, width: 32 + 8 * i })),
  steps: (n) => 4 * n,
  async check(job, output) {
    expect(output.files).toHaveLength(1);
    const [file] = output.files;
    expect(file).toMatchObject({ mediaType: 'image/png', width: job.input.width, height: job.input.height });
    const meta = await sharp(file!.bytes).metadata();
    expect([meta.width, meta.height]).toEqual([job.input.width, job.input.height]);
  },
  slow: { jobs: (n) => Array.from({ length: n }, (_, i) => imageJob(`slow${i}`, { steps: 400 })) },
  bad: { job: () => imageJob('zero-steps', { steps: 0 }), code: 'INVALID_INPUT', message: /node 3 \(KSampler\).*Value 0 smaller than min of 1: steps/ },
});

describe('comfyui engine: the workflow and its inputs', () => {
  const engine = new ComfyUiEngine();
  afterAll(() => engine.close());

  it('fills the named inputs: the same job gives the same image, another seed or prompt another image', async () => {
    const loaded = await engine.load(manifest(), WORKFLOW, cpuDevice(512));
    const [a, b, c, d] = (await loaded.run([
      imageJob('a', { seed: 1 }), imageJob('b', { seed: 1, prompt: 'a picture of a' }), imageJob('c', { seed: 2, prompt: 'a picture of a' }), imageJob('d', { seed: 1, prompt: 'other' }),
    ], () => {})).outputs;
    expect(pngOf(a!).equals(pngOf(b!))).toBe(true);
    expect(pngOf(a!).equals(pngOf(c!))).toBe(false);
    expect(pngOf(a!).equals(pngOf(d!))).toBe(false);
    await loaded.unload();
  });

  it('takes the workflow inline, or from the model file when settings name none', async () => {
    const workflow = JSON.parse(readFileSync(WORKFLOW, 'utf8')) as Record<string, unknown>;
    const inline = await engine.load(manifest({ workflow }, 'inline'), '/nonexistent', cpuDevice(512));
    const fromModelFile = await engine.load(manifest({ workflow: undefined }, 'model-file'), WORKFLOW, cpuDevice(512));
    const [one] = (await inline.run([imageJob('x')], () => {})).outputs;
    const [two] = (await fromModelFile.run([imageJob('x')], () => {})).outputs;
    expect(pngOf(one!).equals(pngOf(two!))).toBe(true);
    await inline.unload();
    await fromModelFile.unload();
  });

  it('refuses at load a mapping onto a node or field the workflow lacks, a link, or a UI-format workflow', async () => {
    const dir = tempDir();
    const ui = join(dir, 'ui.json');
    writeFileSync(ui, JSON.stringify({ nodes: [], links: [], version: 0.4 }));
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ inputs: { prompt: { node: '66', field: 'text' } } }, /settings\.inputs\.prompt: the workflow has no node "66"/],
      [{ inputs: { seed: { node: '3', field: 'noise_seed' } } }, /node "3" \(KSampler\) has no input "noise_seed" \(it has: seed, steps/],
      [{ inputs: { prompt: { node: '3', field: 'positive' } } }, /input "positive" is a link to another node/],
      [{ workflow: ui }, /UI format; export it with "Export \(API\)"/],
      [{ inputs: { colour: { node: '6', field: 'text' } } }, /invalid settings: settings\.inputs/],
    ];
    for (const [settings, message] of cases) {
      const loading = engine.load(manifest(settings), WORKFLOW, cpuDevice(512));
      await expect(loading).rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false });
      await expect(loading).rejects.toThrow(message);
    }
  });

  it('a workflow the server refuses fails every job with the node and its message (node_errors)', async () => {
    const workflow = JSON.parse(readFileSync(WORKFLOW, 'utf8')) as Record<string, { inputs: Record<string, unknown> }>;
    workflow['4']!.inputs.ckpt_name = 'missing.safetensors';
    const loaded = await engine.load(manifest({ workflow }, 'missing-checkpoint'), WORKFLOW, cpuDevice(512));
    const outputs = (await loaded.run([imageJob('p'), imageJob('q')], () => {})).outputs;
    for (const output of outputs) {
      expect(output).toMatchObject({ ok: false, code: 'INVALID_INPUT', retryable: false });
      expect((output as { message: string }).message).toMatch(/node 4 \(CheckpointLoaderSimple\): Value not in list: ckpt_name: 'missing.safetensors'/);
    }
    await loaded.unload();
  });
});

describe('comfyui engine: a server that misbehaves', () => {
  const engine = new ComfyUiEngine();
  afterAll(() => engine.close());

  it('execution_error mid-run fails that job, naming the node and the exception; the next job still runs', async () => {
    await comfy.knobs({ failAtStep: 3 });
    const loaded = await engine.load(manifest(), WORKFLOW, cpuDevice(512));
    const first = loaded.run([imageJob('fails')], () => {});
    const { outputs: [failed] } = await first;
    expect(failed).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: false });
    expect((failed as { message: string }).message).toMatch(/node 3 \(KSampler\) failed: RuntimeError: stand-in sampler failure at step 3/);
    await comfy.knobs({ failAtStep: null });
    const [ok] = (await loaded.run([imageJob('works')], () => {})).outputs;
    expect(ok).toMatchObject({ ok: true });
    await loaded.unload();
  });

  it('a WebSocket dropped mid-run falls back to polling /history: the images still arrive, in order', async () => {
    await comfy.knobs({ dropSocketAtStep: 2, stepMs: 20 });
    const loaded = await engine.load(manifest(), WORKFLOW, cpuDevice(512));
    const jobs = [imageJob('w0', { seed: 10 }), imageJob('w1', { seed: 11 })];
    const progress: Progress[] = [];
    const dropped = (await loaded.run(jobs, (step) => progress.push(step))).outputs;
    expect(comfy.output()).toMatch(/comfyui-standin: dropping 1 WebSocket\(s\) at step 2/);
    // Step progress stopped with the socket (only the prompts' ends moved the bar after it); the results did not.
    expect(progress.length).toBeLessThan(8);
    expect(progress.at(-1)).toEqual({ step: 8, total: 8 });
    await comfy.knobs({ stepMs: 10 });
    const again = (await loaded.run(jobs, () => {})).outputs;
    dropped.forEach((output, i) => expect(pngOf(output).equals(pngOf(again[i]!))).toBe(true));
    await loaded.unload();
  });

  it('a dropped connection on a read is retried; on POST /prompt it fails that job retryably (it may have been queued)', async () => {
    const loaded = await engine.load(manifest(), WORKFLOW, cpuDevice(512));
    await comfy.knobs({ dropConnections: { path: '/view', times: 1 } });
    const [viewed] = (await loaded.run([imageJob('v')], () => {})).outputs;
    expect(viewed).toMatchObject({ ok: true });
    await comfy.knobs({ dropConnections: { path: '/prompt', times: 1 } });
    const [lost, next] = (await loaded.run([imageJob('lost'), imageJob('next')], () => {})).outputs;
    expect(lost).toMatchObject({ ok: false, code: 'NOT_READY', retryable: true });
    expect((lost as { message: string }).message).toMatch(/ComfyUI at http:\/\/127\.0\.0\.1:\d+ is unreachable/);
    expect(next).toMatchObject({ ok: true });
    await loaded.unload();
  });

  it('503 and 429 on submit are retried a bounded number of times, then fail the job retryably', async () => {
    const loaded = await engine.load(manifest(), WORKFLOW, cpuDevice(512));
    await comfy.knobs({ busy: { status: 503, times: 1 } });
    const [retried] = (await loaded.run([imageJob('busy-once')], () => {})).outputs;
    expect(retried).toMatchObject({ ok: true });
    await comfy.knobs({ busy: { status: 429, times: 50 } });
    const [refused] = (await loaded.run([imageJob('busy-always')], () => {})).outputs;
    expect(refused).toMatchObject({ ok: false, code: 'NOT_READY', retryable: true });
    expect((refused as { message: string }).message).toMatch(/answered 429/);
    await loaded.unload();
  });

  it('a batch past its timeout fails retryably and is taken off the server (interrupt + queue delete)', async () => {
    const loaded = await engine.load(manifest({ timeoutMs: 600 }), WORKFLOW, cpuDevice(512));
    const before = (await comfy.state<StandInState>()).submitted.length;
    const outputs = (await loaded.run([imageJob('t0', { steps: 500 }), imageJob('t1', { steps: 500 })], () => {})).outputs;
    for (const output of outputs) {
      expect(output).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: true });
      expect((output as { message: string }).message).toMatch(/took longer than 600 ms/);
    }
    const state = await waitFor(async () => {
      const current = await comfy.state<StandInState>();
      return current.running === null && current.pending.length === 0 ? current : null;
    }, { what: 'the stand-in to be idle again' });
    // Whatever reached the server by the deadline (a slow machine may not have sent t1 yet) was taken off it:
    // the running prompt interrupted, a waiting one deleted from the queue.
    const ours = state.submitted.slice(before);
    expect(ours.length).toBeGreaterThan(0);
    for (const id of ours) expect([...state.interrupts, ...state.deleted]).toContain(id);
    if (ours.length === 2) {
      expect(state.interrupts).toContain(ours[0]);
      expect(state.deleted).toContain(ours[1]);
    }
    await loaded.unload();
  });

  it('cancel: a queued prompt leaves the queue (POST /queue delete), the running one is interrupted (POST /interrupt)', async () => {
    const loaded = await engine.load(manifest(), WORKFLOW, cpuDevice(512));
    const jobs = [imageJob('c0', { steps: 300 }), imageJob('c1', { steps: 300 })];
    let progressed = false;
    const running = loaded.run(jobs, () => (progressed = true));
    await waitFor(() => progressed, { what: 'progress' });
    loaded.cancel(['c1']);
    await waitFor(async () => (await comfy.state<StandInState>()).deleted.length > 0 || null, { what: 'the queue delete' });
    loaded.cancel(['c0']);
    const { outputs } = await running;
    expect(outputs.map((output) => (output as { code?: string }).code)).toEqual(['CANCELLED', 'CANCELLED']);
    const state = await comfy.state<StandInState>();
    const [first, second] = state.submitted.slice(-2);
    expect(state.deleted).toContain(second);
    expect(state.interrupts).toContain(first);
    await loaded.unload();
  });

  it('an unreachable server fails the load retryably (NOT_READY) once its readiness window is over', async () => {
    const loading = engine.load(manifest({ url: 'http://127.0.0.1:9', readyWaitMs: 300 }), WORKFLOW, cpuDevice(512));
    await expect(loading).rejects.toMatchObject({ code: 'NOT_READY', retryable: true });
    await expect(loading).rejects.toThrow(/ComfyUI at http:\/\/127\.0\.0\.1:9 did not answer \/system_stats within readyWaitMs \(300 ms\)/);
  });
});

describe('comfyui engine: memory and the server endpoint', () => {
  it('on a GPU books what ComfyUI\'s torch holds; on the CPU never the machine-wide vram figures; asks it to free memory on unload (/free)', async () => {
    const cuda = await startKnobStandIn('comfyui', ['--device', 'cuda']);
    const engine = new ComfyUiEngine();
    const gpu: Device = { ...cpuDevice(4096), id: 'gpu0', kind: 'gpu' };
    const warm = await engine.load(manifest({ url: cuda.url }), WORKFLOW, gpu);
    (await warm.run([imageJob('warm')], () => {})).outputs; // the stand-in "loads its checkpoint": 1536 MiB held
    const loaded = await engine.load(manifest({ url: cuda.url }, 'second'), WORKFLOW, gpu);
    expect(loaded.memoryMB).toBe(1536);
    // The CPU stand-in reports the machine's RAM as its device's, as ComfyUI does: a fronted server keeps its declared 64.
    const onCpu = await engine.load(manifest({}, 'cpu'), WORKFLOW, cpuDevice(4096));
    expect(onCpu.memoryMB).toBe(64);
    const before = (await cuda.state<StandInState>()).frees;
    await loaded.unload();
    await warm.unload();
    expect((await cuda.state<StandInState>()).frees).toBe(before + 2);
    await engine.close();
    await cuda.stop();
  });

  it('on the CPU, a server the agent started is booked at its process tree\'s resident memory', async () => {
    const engine = new ComfyUiEngine({ endpoints: async () => ({ url: comfy.url, residentMB: () => 321, release: async () => {} }) });
    const loaded = await engine.load(manifest({ url: undefined }, 'started'), WORKFLOW, cpuDevice(4096));
    expect(loaded.memoryMB).toBe(321);
    await engine.close();
  });

  it('without settings.url it asks the endpoint provider for a server, and releases it on unload', async () => {
    const calls: string[] = [];
    const engine = new ComfyUiEngine({
      endpoints: async ({ manifest: model, device }) => {
        calls.push(`start ${model.name} on ${device.id}`);
        return { url: comfy.url, release: async () => { calls.push(`release ${model.name}`); } };
      },
    });
    const loaded = await engine.load(manifest({ url: undefined }, 'provided'), WORKFLOW, cpuDevice(512));
    const [output] = (await loaded.run([imageJob('provided')], () => {})).outputs;
    expect(output).toMatchObject({ ok: true });
    await loaded.unload();
    expect(calls).toEqual(['start provided on cpu', 'release provided']);
    const none = new ComfyUiEngine();
    await expect(none.load(manifest({ url: undefined }), WORKFLOW, cpuDevice(512))).rejects.toThrow(/names no settings\.url and this agent starts no comfyui servers/);
  });
});
