import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../../src/agent/devices.js';
import type { EngineJob, JobOutput, Progress } from '../../../../src/agent/core/engine.js';
import { OipEngine } from '../../../../src/agent/engines/oip/index.js';
import type { ModelManifest } from '../../../../src/protocol/index.js';
import { linear } from '../../../fixtures/standins/linear-layer.js';
import { waitFor } from '../../../helpers/mesh.js';
import { startKnobStandIn, type StandIn } from '../../../helpers/knob-standins.js';
import { adapterContract } from '../../adapter-contract.js';

const IN = 8;
const OUT = 4;
const DEFAULT_KNOBS = { binary: true, failInfer: null, dropConnections: null, notReady: false, slowMs: 4000 };

interface StandInState { infers: { model: string; rows: number; binaryInput: boolean; binaryOutput: boolean; header: string }[] }

let oip: StandIn;
beforeAll(async () => {
  oip = await startKnobStandIn('oip', ['--input-dim', String(IN), '--output-dim', String(OUT)]);
});
afterAll(() => oip?.stop());
beforeEach(() => oip.knobs(DEFAULT_KNOBS));

function manifest(settings: Record<string, unknown> = {}, name = 'linear'): ModelManifest {
  return {
    name, version: '1', engine: 'oip', digest: `sha256:${'1'.repeat(64)}`, bytes: 0, memoryMB: 32,
    jobTypes: ['tensor'], params: { inputDim: IN, outputDim: OUT }, settings: { url: oip.url, ...settings },
  };
}

const tensorJob = (id: string, seed: number): EngineJob => ({ id, input: { x: Array.from({ length: IN }, (_, j) => Math.sin(seed * 7 + j) * 3) } });
const jobsOf = (n: number, prefix = 'job'): EngineJob[] => Array.from({ length: n }, (_, i) => tensorJob(`${prefix}${i}`, i));

/** The job's y must be the stand-in's layer applied to its own x. */
function expectLinear(job: EngineJob, output: JobOutput): void {
  expect(output, JSON.stringify(output)).toMatchObject({ ok: true, files: [] });
  const result = (output as { result: { y: number[]; shape: number[] } }).result;
  expect(result.shape).toEqual([OUT]);
  const expected = linear(job.input.x as number[], 1, IN, OUT);
  expect(result.y).toEqual(Array.from(expected));
}

const infers = async (): Promise<StandInState['infers']> => (await oip.state<StandInState>()).infers;

adapterContract('oip (against oip-standin)', {
  engine: () => new OipEngine(),
  model: () => ({ manifest: manifest(), path: '/unused' }),
  jobs: (n) => jobsOf(n),
  steps: (n) => Math.ceil(n / 4), // the stand-in's linear model takes 4 rows per request
  check: (job, output) => expectLinear(job, output),
  slow: { jobs: (n) => jobsOf(n, 'slow'), model: () => ({ manifest: manifest({ model: 'linear_slow' }, 'slow'), path: '/unused' }) },
  bad: { job: () => ({ id: 'short', input: { x: [1, 2, 3] } }), code: 'INVALID_INPUT', message: /x must hold 8 numbers \(shape \[8\]\), not 3/ },
});

describe('oip engine: batching and the binary tensor extension', () => {
  const engine = new OipEngine();
  afterAll(() => engine.close());

  it('stacks a batch along the first axis up to the server\'s max_batch_size, one progress step per request', async () => {
    const loaded = await engine.load(manifest(), '', cpuDevice(512));
    const jobs = jobsOf(6);
    const before = (await infers()).length;
    const progress: Progress[] = [];
    const outputs = (await loaded.run(jobs, (step) => progress.push(step))).outputs;
    jobs.forEach((job, i) => expectLinear(job, outputs[i]!));
    expect((await infers()).slice(before).map((infer) => infer.rows)).toEqual([4, 2]);
    expect(progress).toEqual([{ step: 1, total: 2 }, { step: 2, total: 2 }]);
    await loaded.unload();
  });

  it('settings.maxBatchSize caps the rows per request; a model without a batch axis gets one request per job', async () => {
    const capped = await engine.load(manifest({ maxBatchSize: 2 }), '', cpuDevice(512));
    const fixed = await engine.load(manifest({ model: 'linear_fixed' }, 'fixed'), '', cpuDevice(512));
    const jobs = jobsOf(3);
    const before = (await infers()).length;
    const a = (await capped.run(jobs, () => {})).outputs;
    const b = (await fixed.run(jobs, () => {})).outputs;
    jobs.forEach((job, i) => {
      expectLinear(job, a[i]!);
      expectLinear(job, b[i]!);
    });
    expect((await infers()).slice(before).map((infer) => `${infer.model}:${infer.rows}`)).toEqual(['linear:2', 'linear:1', 'linear_fixed:1', 'linear_fixed:1', 'linear_fixed:1']);
    await capped.unload();
    await fixed.unload();
  });

  it('uses binary tensors when the server lists the extension, JSON when it does not — with the same results', async () => {
    const jobs = jobsOf(3);
    const binary = await engine.load(manifest(), '', cpuDevice(512));
    const viaBinary = (await binary.run(jobs, () => {})).outputs;
    expect((await infers()).at(-1)).toMatchObject({ binaryInput: true, binaryOutput: true });
    await oip.knobs({ binary: false });
    const plain = await engine.load(manifest({ model: 'linear' }, 'plain'), '', cpuDevice(512));
    const viaJson = (await plain.run(jobs, () => {})).outputs;
    expect((await infers()).at(-1)).toMatchObject({ binaryInput: false, binaryOutput: false });
    expect(viaJson).toEqual(viaBinary);
    const forcedJson = await engine.load(manifest({ model: 'linear', binary: 'never' }, 'never'), '', cpuDevice(512));
    await oip.knobs({ binary: true });
    (await forcedJson.run(jobs, () => {})).outputs;
    expect((await infers()).at(-1)).toMatchObject({ binaryInput: false, binaryOutput: false });
    for (const loaded of [binary, plain, forcedJson]) await loaded.unload();
  });
});

describe('oip engine: errors and a server that misbehaves', () => {
  const engine = new OipEngine();
  afterAll(() => engine.close());

  it('an {"error"} answer becomes a clear job error: 400 not retryable, 500 retryable', async () => {
    const loaded = await engine.load(manifest(), '', cpuDevice(512));
    await oip.knobs({ failInfer: { status: 400, times: 1, error: 'inference request batch-size must be <= 4' } });
    const refused = (await loaded.run(jobsOf(2), () => {})).outputs;
    for (const output of refused) {
      expect(output).toMatchObject({ ok: false, code: 'INVALID_INPUT', retryable: false });
      expect((output as { message: string }).message).toMatch(/refused the request: inference request batch-size must be <= 4/);
    }
    await oip.knobs({ failInfer: { status: 500, times: 1, error: 'CUDA error: an illegal memory access' } });
    const [crashed] = (await loaded.run(jobsOf(1), () => {})).outputs;
    expect(crashed).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: true });
    expect((crashed as { message: string }).message).toMatch(/answered 500: CUDA error: an illegal memory access/);
    await loaded.unload();
  });

  it('429 and 503 are retried (bounded), then fail the jobs retryably', async () => {
    const loaded = await engine.load(manifest(), '', cpuDevice(512));
    await oip.knobs({ failInfer: { status: 503, times: 2 } });
    const jobs = jobsOf(2);
    const retried = (await loaded.run(jobs, () => {})).outputs;
    jobs.forEach((job, i) => expectLinear(job, retried[i]!));
    await oip.knobs({ failInfer: { status: 429, times: 10 } });
    const [busy] = (await loaded.run(jobsOf(1), () => {})).outputs;
    expect(busy).toMatchObject({ ok: false, code: 'NOT_READY', retryable: true });
    expect((busy as { message: string }).message).toMatch(/answered 429: too many requests/);
    await loaded.unload();
  });

  it('a dropped connection is sent again (inference is stateless); a server that keeps dropping fails retryably', async () => {
    const loaded = await engine.load(manifest(), '', cpuDevice(512));
    await oip.knobs({ dropConnections: { path: '/v2/models/linear/infer', times: 1 } });
    const jobs = jobsOf(2);
    const resent = (await loaded.run(jobs, () => {})).outputs;
    jobs.forEach((job, i) => expectLinear(job, resent[i]!));
    await oip.knobs({ dropConnections: { path: '/v2/models/linear/infer', times: 10 } });
    const [dropped] = (await loaded.run(jobsOf(1), () => {})).outputs;
    expect(dropped).toMatchObject({ ok: false, code: 'NOT_READY', retryable: true });
    expect((dropped as { message: string }).message).toMatch(/is unreachable/);
    await loaded.unload();
  });

  it('load reads metadata and readiness: unknown model, not ready, several inputs, unreachable server', async () => {
    const cases: [ModelManifest, string, boolean, RegExp][] = [
      [manifest({ model: 'nope' }), 'ENGINE_FAILED', false, /has no model "nope": Request for unknown model: 'nope' is not found/],
      [manifest({ version: '2' }), 'ENGINE_FAILED', false, /has no model "linear": .*version 2 is not found/],
      [manifest({ model: 'pair' }), 'ENGINE_FAILED', false, /several inputs \(LEFT, RIGHT\); name one in settings\.input/],
      [manifest({ model: 'pair', input: 'MIDDLE' }), 'ENGINE_FAILED', false, /no input "MIDDLE" \(it has: LEFT, RIGHT\)/],
      [manifest({ url: 'http://127.0.0.1:9' }), 'NOT_READY', true, /is unreachable/],
      [manifest({ binary: 'sometimes' }), 'ENGINE_FAILED', false, /invalid settings: settings\.binary/],
    ];
    for (const [model, code, retryable, message] of cases) {
      const loading = engine.load(model, '', cpuDevice(512));
      await expect(loading).rejects.toMatchObject({ code, retryable });
      await expect(loading).rejects.toThrow(message);
    }
    const pair = await engine.load(manifest({ model: 'pair', input: 'RIGHT', version: '1' }, 'pair'), '', cpuDevice(512));
    await pair.unload();
    await oip.knobs({ notReady: true });
    await expect(engine.load(manifest(), '', cpuDevice(512))).rejects.toMatchObject({ code: 'NOT_READY', retryable: true, message: expect.stringMatching(/model "linear" is not ready/) });
  });

  it('cancelling a job whose request is in flight aborts the request: the server sees its client leave', async () => {
    const loaded = await engine.load(manifest({ model: 'linear_slow' }, 'slow'), '', cpuDevice(512));
    await oip.knobs({ slowMs: 20_000 });
    const running = loaded.run(jobsOf(1), () => {});
    await waitFor(async () => (await infers()).at(-1)?.model === 'linear_slow' || null, { what: 'the slow infer to arrive' });
    const cancelledAt = performance.now();
    loaded.cancel(['job0']);
    expect((await running).outputs).toMatchObject([{ ok: false, code: 'CANCELLED' }]);
    expect(performance.now() - cancelledAt).toBeLessThan(3000);
    await waitFor(() => oip.output().includes('oip-standin: client left during a slow infer of linear_slow'), { what: 'the stand-in to see the client leave' });
    await loaded.unload();
  });

  it('without settings.url it asks the endpoint provider for a server, and releases it on unload', async () => {
    const calls: string[] = [];
    const provided = new OipEngine({
      endpoints: async ({ manifest: model }) => {
        calls.push(`start ${model.name}`);
        return { url: oip.url, release: async () => { calls.push(`release ${model.name}`); } };
      },
    });
    const loaded = await provided.load(manifest({ url: undefined }), '', cpuDevice(512));
    const jobs = jobsOf(1);
    expectLinear(jobs[0]!, ((await loaded.run(jobs, () => {})).outputs)[0]!);
    await loaded.unload();
    expect(calls).toEqual(['start linear', 'release linear']);
  });
});

describe('oip engine: input hygiene (issue 19)', () => {
  it('Open Inference Protocol fields in a job\'s input (parameters, outputs, model, id) never reach the server: it receives only what gpumesh builds', async () => {
    const engine = new OipEngine();
    const loaded = await engine.load(manifest(), '', cpuDevice(512));
    try {
      const clean = tensorJob('clean', 1);
      // What a client might try to smuggle upstream: Triton's sequence and priority controls, another output, another model.
      const smuggled: EngineJob = {
        id: 'smuggled',
        input: {
          ...clean.input, parameters: { sequence_id: 7, sequence_start: true, priority: 1, timeout: 1, binary_data_output: true },
          outputs: [{ name: 'secret_output' }], model_name: 'other_model', model_version: '9', id: 'client-chosen', inputs: [{ name: 'INPUT1', datatype: 'BYTES', shape: [1], data: ['x'] }],
        },
      };
      const before = (await infers()).length;
      const outputs = (await loaded.run([clean, smuggled], () => {})).outputs;
      // The engine reads x and nothing else: both jobs are the same computation.
      expectLinear(clean, outputs[0]!);
      expectLinear(smuggled, outputs[1]!);
      const sent = (await infers()).slice(before);
      expect(sent.length).toBeGreaterThan(0);
      for (const infer of sent) {
        expect(infer.model).toBe('linear');
        for (const word of ['sequence', 'priority', 'timeout', 'secret_output', 'other_model', 'client-chosen', 'INPUT1', 'BYTES']) expect(infer.header).not.toContain(word);
      }
    } finally {
      await loaded.unload();
      await engine.close();
    }
  });
});
