import sharp from 'sharp';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../../src/agent/devices.js';
import type { EngineJob, JobOutput, LoadedModel, Progress } from '../../../../src/agent/core/engine.js';
import { SdcppEngine } from '../../../../src/agent/engines/sdcpp/index.js';
import type { ModelManifest } from '../../../../src/protocol/index.js';
import { waitFor } from '../../../helpers/mesh.js';
import { freePort } from '../../../helpers/processes.js';
import { StandinLauncher, startStandin, type Standin } from '../../../helpers/standins.js';
import { engineContract } from '../../engine-contract.js';

function manifest(settings: Record<string, unknown> = {}, memoryMB = 512): ModelManifest {
  return {
    name: 'sd-standin', version: '1', engine: 'sdcpp', digest: `sha256:${'0'.repeat(64)}`, bytes: 0,
    memoryMB, jobTypes: ['image'], params: { defaultSteps: 2 },
    // Fast polls keep the tests short; the defaults (100 ms to 1 s) suit real generations.
    settings: { poll: { initialMs: 20, maxMs: 100 }, busyBackoff: { initialMs: 50, maxMs: 200 }, ...settings },
  };
}

const imageJobs = (n: number, input: Record<string, unknown> = {}, prefix = 'job'): EngineJob[] =>
  Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}`, input: { prompt: `a lighthouse ${i}`, seed: 10 + i, width: 64, height: 64, steps: 2, ...input } }));

const ok = (output: JobOutput | undefined): Extract<JobOutput, { ok: true }> => {
  expect(output, JSON.stringify(output)).toMatchObject({ ok: true });
  return output as Extract<JobOutput, { ok: true }>;
};

const contractLauncher = new StandinLauncher('sdcpp', ['--step-ms', '60', '--queue-size', '4']);
afterAll(() => contractLauncher.stopAll());

engineContract('sdcpp (sd-server stand-in, started per load by a test launcher)', {
  engine: () => new SdcppEngine({ endpoints: contractLauncher.provider }),
  model: () => ({ manifest: manifest(), path: '' }),
  jobs: (n) => imageJobs(n),
  slowJobs: (n) => imageJobs(n, { steps: 6 }),
  // sd.cpp works in latent pixels of 8: the server refuses a side that is not a multiple of 8.
  invalidBatch: () => imageJobs(1, { width: 100 }),
  progress: { total: 6, everyStep: false },
  processes: () => contractLauncher.count,
  pids: () => contractLauncher.pids(),
  crashCode: 'ENGINE_UNREACHABLE',
  // A server someone else runs: its memory is its own, its bytes are loaded by the server, and its crashes are failed requests.
  measuresMemory: false,
  verifiesBytes: false,
  ownsProcesses: false,
});

describe('sdcpp engine against a misbehaving sd-server stand-in', () => {
  const standins: Standin[] = [];
  const models: LoadedModel[] = [];
  afterEach(async () => {
    await Promise.all(models.splice(0).map((model) => model.unload()));
    await Promise.all(standins.splice(0).map((standin) => standin.kill()));
  });

  async function serve(flags: string[] = [], settings: Record<string, unknown> = {}): Promise<{ standin: Standin; model: LoadedModel }> {
    const standin = await startStandin('sdcpp', flags);
    standins.push(standin);
    const model = await new SdcppEngine().load(manifest({ url: standin.url, ...settings }), '', cpuDevice(2048));
    models.push(model);
    return { standin, model };
  }

  /** Fill the server's queue from another client, as a second user of a shared sd-server would. */
  async function foreignJob(standin: Standin, steps: number): Promise<void> {
    const reply = await fetch(`${standin.url}/sdcpp/v1/img_gen`, {
      method: 'POST', body: JSON.stringify({ prompt: 'someone else', width: 64, height: 64, sample_params: { sample_steps: steps } }),
    });
    expect(reply.status).toBe(202);
  }

  it('waits out a full queue (429) and then succeeds', async () => {
    const { standin, model } = await serve(['--queue-size', '1', '--step-ms', '100']);
    await foreignJob(standin, 4);
    const [output] = (await model.run(imageJobs(1), () => {})).outputs;
    ok(output);
    expect((await standin.stats<{ rejected429: number }>()).rejected429).toBeGreaterThan(0);
  });

  it('gives up on a queue that stays full with a retryable ENGINE_BUSY once the job runs out of time', async () => {
    const { standin, model } = await serve(['--queue-size', '1', '--step-ms', '200']);
    await foreignJob(standin, 30);
    const [job] = imageJobs(1);
    const started = Date.now();
    const [output] = (await model.run([{ ...job!, deadlineAt: Date.now() + 1000 }], () => {})).outputs;
    expect(output).toMatchObject({ ok: false, code: 'ENGINE_BUSY', retryable: true });
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('a 400 becomes a non-retryable INVALID_INPUT carrying the server\'s message; the batch\'s other jobs still run', async () => {
    const { standin, model } = await serve();
    const jobs = [...imageJobs(1, { width: 100 }, 'bad'), ...imageJobs(1, {}, 'good')];
    const [bad, good] = (await model.run(jobs, () => {})).outputs;
    expect(bad).toMatchObject({ ok: false, code: 'INVALID_INPUT', retryable: false });
    expect((bad as { message: string }).message).toContain('invalid generation parameters');
    expect((bad as { message: string }).message).toContain('400');
    ok(good);
    expect((await standin.stats<{ rejected400: number }>()).rejected400).toBe(1);
  });

  it('refuses a size outside the server\'s advertised limits without sending it', async () => {
    const { standin, model } = await serve();
    const [output] = (await model.run(imageJobs(1, { width: 32 }), () => {})).outputs;
    expect(output).toMatchObject({ ok: false, code: 'INVALID_INPUT', retryable: false });
    expect((output as { message: string }).message).toMatch(/width 32 is outside the server's 64–4096/);
    expect((await standin.stats<{ submitted: number; rejected400: number }>())).toMatchObject({ submitted: 0, rejected400: 0 });
  });

  it('a connection dropped in the middle of the 202 is a retryable ENGINE_UNREACHABLE; the next job succeeds', async () => {
    const { model } = await serve(['--drop-submit', '1']);
    const [dropped] = (await model.run(imageJobs(1, {}, 'a'), () => {})).outputs;
    expect(dropped).toMatchObject({ ok: false, code: 'ENGINE_UNREACHABLE', retryable: true });
    expect((dropped as { message: string }).message).toMatch(/dropped in the middle/);
    ok(((await model.run(imageJobs(1, {}, 'b'), () => {})).outputs)[0]);
  });

  it('a poll cut off mid-answer is asked again (polls are safe to repeat) and the job succeeds', async () => {
    const { standin, model } = await serve(['--drop-poll', '2']);
    ok(((await model.run(imageJobs(1), () => {})).outputs)[0]);
    expect((await standin.stats<{ dropped: number }>()).dropped).toBe(2);
  });

  it('a slow server (every answer delayed) still delivers within the job\'s time', async () => {
    const { model } = await serve(['--slow-ms', '400']);
    const [job] = imageJobs(1);
    const started = Date.now();
    ok(((await model.run([{ ...job!, deadlineAt: Date.now() + 30_000 }], () => {})).outputs)[0]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(800);
  });

  it('a job that outlives its deadline ends DEADLINE_EXCEEDED and is cancelled on the server', async () => {
    const { standin, model } = await serve(['--step-ms', '100', '--queue-size', '4']);
    await foreignJob(standin, 20);
    const [job] = imageJobs(1);
    const [output] = (await model.run([{ ...job!, deadlineAt: Date.now() + 600 }], () => {})).outputs;
    expect(output).toMatchObject({ ok: false, code: 'DEADLINE_EXCEEDED', retryable: false });
    await waitFor(async () => (await standin.stats<{ cancels: { outcome: string }[] }>()).cancels.some((cancel) => cancel.outcome === 'cancelled'), { what: 'the server to cancel the queued job' });
  });

  it('cancel reaches the server: a queued job is cancelled there; a generating one (409) is let go at once', async () => {
    const { standin, model } = await serve(['--step-ms', '150', '--queue-size', '4'], { maxInFlight: 2 });
    const jobs = imageJobs(2, { steps: 8 });
    let first = true;
    const started = Date.now();
    const outputs = (await model.run(jobs, () => {
      if (!first) return;
      first = false;
      // Job 0 is generating (its first step is done); job 1 waits in the server's queue.
      model.cancel([jobs[1]!.id]);
      setTimeout(() => model.cancel([jobs[0]!.id]), 100);
    })).outputs;
    expect(outputs).toMatchObject([
      { jobId: 'job0', ok: false, code: 'CANCELLED', retryable: false },
      { jobId: 'job1', ok: false, code: 'CANCELLED', retryable: false },
    ]);
    // Well before job 0's 8 × 150 ms of sampling would have ended.
    expect(Date.now() - started).toBeLessThan(1200);
    await waitFor(async () => (await standin.stats<{ cancels: unknown[] }>()).cancels.length === 2, { what: 'both cancels to reach the server' });
    const { cancels } = await standin.stats<{ cancels: { outcome: string }[] }>();
    expect(cancels.map((cancel) => cancel.outcome).sort()).toEqual(['cancelled', 'conflict']);
  });

  it('a job the server fails is a retryable ENGINE_FAILED with the server\'s code and message', async () => {
    const { model } = await serve(['--fail-prompt', 'BOOM']);
    const [output] = (await model.run(imageJobs(1, { prompt: 'BOOM goes the lighthouse' }), () => {})).outputs;
    expect(output).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: true });
    expect((output as { message: string }).message).toContain('generation_failed: generate_image returned no results');
  });

  it('202 then a number of polls: the job completes only after the server was polled enough, and succeeds', async () => {
    const { standin, model } = await serve(['--min-polls', '6']);
    ok(((await model.run(imageJobs(1), () => {})).outputs)[0]);
    expect((await standin.stats<{ polls: number }>()).polls).toBeGreaterThanOrEqual(6);
  });

  it('falls back to the A1111 API (POST /sdapi/v1/txt2img) on a server without the native API', async () => {
    const { standin, model } = await serve(['--native', 'off', '--step-ms', '20']);
    const jobs = imageJobs(2);
    const progress: Progress[] = [];
    const outputs = (await model.run(jobs, (step) => progress.push(step))).outputs;
    for (const output of outputs) ok(output);
    expect(await standin.stats()).toMatchObject({ txt2img: 2, submitted: 0 });
    expect(progress.at(-1)).toEqual({ step: 4, total: 4 });
  });

  it('with settings.api "native", a server without the native API fails the load, saying so', async () => {
    const standin = await startStandin('sdcpp', ['--native', 'off']);
    standins.push(standin);
    await expect(new SdcppEngine().load(manifest({ url: standin.url, api: 'native' }), '', cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false, message: expect.stringMatching(/no native sd.cpp API/) });
  });

  it('the PNGs are real, of the asked size, and the same prompt and seed give the same image', async () => {
    const { model } = await serve();
    const [a] = (await model.run(imageJobs(1, { width: 96, height: 72 }, 'a'), () => {})).outputs;
    const [b] = (await model.run(imageJobs(1, { width: 96, height: 72 }, 'b'), () => {})).outputs;
    const file = ok(a).files[0]!;
    expect(await sharp(Buffer.from(file.bytes)).metadata()).toMatchObject({ format: 'png', width: 96, height: 72 });
    expect(file).toMatchObject({ width: 96, height: 72, mediaType: 'image/png' });
    expect(Buffer.from(ok(b).files[0]!.bytes).equals(Buffer.from(file.bytes))).toBe(true);
  });

  it('at load, waits for a server that is still loading its model (not listening yet)', async () => {
    const port = await freePort();
    const standin = await startStandin('sdcpp', ['--port', String(port), '--start-delay-ms', '1500'], { waitListening: false });
    standins.push(standin);
    const model = await new SdcppEngine().load(manifest({ url: standin.url }), '', cpuDevice(2048));
    models.push(model);
    ok(((await model.run(imageJobs(1), () => {})).outputs)[0]);
  });

  it('gives up on a server that does not come up within loadTimeoutMs: a retryable ENGINE_UNREACHABLE', async () => {
    const port = await freePort();
    await expect(new SdcppEngine().load(manifest({ url: `http://127.0.0.1:${port}`, loadTimeoutMs: 400 }), '', cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_UNREACHABLE', retryable: true });
  });

  it('refuses bad settings at load, naming the field; refuses a model with neither url nor launcher', async () => {
    await expect(new SdcppEngine().load(manifest({ url: 'ftp://nas:21', maxInFlight: 0 }), '', cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false, message: expect.stringMatching(/settings\.url.*settings\.maxInFlight/s) });
    await expect(new SdcppEngine().load(manifest(), '', cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', message: expect.stringMatching(/no settings\.url/) });
  });

  it('sends the job\'s prompt, negative prompt, seed, size and steps, with the model\'s extra fields, as the native request', async () => {
    const { standin, model } = await serve([], { extra: { sample_params: { sample_method: 'euler' } } });
    ok(((await model.run(imageJobs(1, { negativePrompt: 'fog', seed: 4242, width: 128, height: 64, steps: 3 }), () => {})).outputs)[0]);
    expect(standin.output()).toMatch(/generating job_\w+: "a lighthouse 0" 128x64, 3 steps, seed 4242/);
  });
});

describe('sdcpp engine: progress', () => {
  const launchers: StandinLauncher[] = [];
  afterEach(async () => {
    await Promise.all(launchers.splice(0).map((launcher) => launcher.stopAll()));
  });

  async function progressOf(flags: string[], settings: Record<string, unknown> = {}): Promise<{ progress: Progress[]; outputs: JobOutput[] }> {
    const launcher = new StandinLauncher('sdcpp', flags);
    launchers.push(launcher);
    const model = await new SdcppEngine({ endpoints: launcher.provider }).load(manifest(settings), '', cpuDevice(2048));
    const progress: Progress[] = [];
    const outputs = (await model.run(imageJobs(2, { steps: 4 }), (step) => progress.push(step))).outputs;
    await model.unload();
    return { progress, outputs };
  }

  it('from the sd-server\'s stdout step bars when the job JSON has no progress fields (a server the agent started)', async () => {
    const { progress, outputs } = await progressOf(['--progress-fields', 'off', '--print-steps', 'on', '--step-ms', '80'], { maxInFlight: 1 });
    for (const output of outputs) ok(output);
    // Every step of both jobs, from the log: 1..4 for the first, 5..8 for the second.
    expect(progress.map((step) => step.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(progress.every((step) => step.total === 8)).toBe(true);
  });

  it('from the job\'s progress_step / progress_steps fields when the server has them and prints nothing', async () => {
    const { progress } = await progressOf(['--progress-fields', 'on', '--print-steps', 'off', '--step-ms', '150']);
    const steps = progress.map((step) => step.step);
    // Polled, so a step may be skipped; but there are steps between the jobs' ends.
    expect(steps.some((step) => step % 4 !== 0)).toBe(true);
    expect(steps.at(-1)).toBe(8);
  });

  it('only job completions when the server gives neither', async () => {
    const { progress } = await progressOf(['--progress-fields', 'off', '--print-steps', 'off', '--step-ms', '20']);
    expect(progress).toEqual([{ step: 4, total: 8 }, { step: 8, total: 8 }]);
  });

  it('uses the server\'s own memory figure (--metrics) for a server the agent started', async () => {
    const launcher = new StandinLauncher('sdcpp', ['--metrics', 'on']);
    launchers.push(launcher);
    const model = await new SdcppEngine({ endpoints: launcher.provider }).load(manifest({}, 64), '', cpuDevice(2048));
    expect(model.memoryMB).toBe(700);
    await model.unload();
  });
});
