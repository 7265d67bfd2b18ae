import sharp from 'sharp';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../../src/agent/devices.js';
import type { EngineJob, JobOutput, LoadedModel, Progress } from '../../../../src/agent/core/engine.js';
import { OpenAiImagesEngine } from '../../../../src/agent/engines/openai-images/index.js';
import type { ModelManifest } from '../../../../src/protocol/index.js';
import { StandinLauncher, startStandin, type Standin } from '../../../helpers/standins.js';
import { engineContract } from '../../engine-contract.js';

function manifest(settings: Record<string, unknown> = {}): ModelManifest {
  return {
    name: 'images-standin', version: '1', engine: 'openai-images', digest: `sha256:${'0'.repeat(64)}`, bytes: 0,
    memoryMB: 256, jobTypes: ['image'], params: {},
    settings: { busyBackoff: { initialMs: 50, maxMs: 200 }, ...settings },
  };
}

const imageJobs = (n: number, input: Record<string, unknown> = {}, prefix = 'job'): EngineJob[] =>
  Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}`, input: { prompt: `a red fox ${i}`, seed: 20 + i, width: 64, height: 64, steps: 4, ...input } }));

const ok = (output: JobOutput | undefined): Extract<JobOutput, { ok: true }> => {
  expect(output, JSON.stringify(output)).toMatchObject({ ok: true });
  return output as Extract<JobOutput, { ok: true }>;
};
const messageOf = (output: JobOutput | undefined): string => (output as { message: string }).message;

const contractLauncher = new StandinLauncher('openai-images', ['--slow-ms', '150']);
afterAll(() => contractLauncher.stopAll());

engineContract('openai-images (OpenAI-style image server stand-in, started per load by a test launcher)', {
  engine: () => new OpenAiImagesEngine({ endpoints: contractLauncher.provider }),
  model: () => ({ manifest: manifest(), path: '' }),
  jobs: (n) => imageJobs(n),
  slowJobs: (n) => imageJobs(n),
  invalidBatch: () => imageJobs(1, { width: 100 }),
  // The API reports no steps: a batch's progress is the images finished.
  progress: { total: 3, everyStep: true },
  processes: () => contractLauncher.count,
  pids: () => contractLauncher.pids(),
  crashCode: 'ENGINE_UNREACHABLE',
  // A server someone else runs: its memory is its own, its bytes are loaded by the server, and its crashes are failed requests.
  measuresMemory: false,
  verifiesBytes: false,
  ownsProcesses: false,
});

describe('openai-images engine against a misbehaving stand-in', () => {
  const standins: Standin[] = [];
  const models: LoadedModel[] = [];
  afterEach(async () => {
    await Promise.all(models.splice(0).map((model) => model.unload()));
    await Promise.all(standins.splice(0).map((standin) => standin.kill()));
  });

  async function serve(flags: string[] = [], settings: Record<string, unknown> = {}, env: NodeJS.ProcessEnv = {}): Promise<{ standin: Standin; model: LoadedModel }> {
    const standin = await startStandin('openai-images', flags);
    standins.push(standin);
    const model = await new OpenAiImagesEngine({ env }).load(manifest({ url: standin.url, ...settings }), '', cpuDevice(2048));
    models.push(model);
    return { standin, model };
  }

  it('asks for one b64_json image of the job\'s size per job and returns it as a checked PNG', async () => {
    const { standin, model } = await serve([], { model: 'standin-image' });
    const [output] = (await model.run(imageJobs(1, { width: 128, height: 96 }), () => {})).outputs;
    const file = ok(output).files[0]!;
    expect(await sharp(Buffer.from(file.bytes)).metadata()).toMatchObject({ format: 'png', width: 128, height: 96 });
    expect(standin.output()).toContain('generated 1 × 128x96 for "a red fox 0"');
  });

  it('a 400 in OpenAI\'s error envelope becomes a non-retryable INVALID_INPUT with the server\'s message and param', async () => {
    const { model } = await serve();
    const [output] = (await model.run(imageJobs(1, { width: 100 }), () => {})).outputs;
    expect(output).toMatchObject({ ok: false, code: 'INVALID_INPUT', retryable: false });
    expect(messageOf(output)).toMatch(/Invalid value: '100x64'.*\(param size, code invalid_value\)/);
  });

  it('rate limited (429): backs off, honours Retry-After, then succeeds', async () => {
    const { standin, model } = await serve(['--rate-limit-first', '2', '--retry-after', '1']);
    const started = Date.now();
    ok(((await model.run(imageJobs(1), () => {})).outputs)[0]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1900);
    expect((await standin.stats<{ rejected429: number }>()).rejected429).toBe(2);
  });

  it('still rate limited when the job\'s time runs out: a retryable ENGINE_BUSY', async () => {
    const { model } = await serve(['--rate-limit-first', '1000']);
    const [job] = imageJobs(1);
    const [output] = (await model.run([{ ...job!, deadlineAt: Date.now() + 800 }], () => {})).outputs;
    expect(output).toMatchObject({ ok: false, code: 'ENGINE_BUSY', retryable: true });
  });

  it('a 5xx is a retryable ENGINE_FAILED with the server\'s message', async () => {
    const { model } = await serve(['--server-error-first', '1']);
    const [output] = (await model.run(imageJobs(1), () => {})).outputs;
    expect(output).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: true });
    expect(messageOf(output)).toContain('500');
    expect(messageOf(output)).toContain('The server had an error while processing your request');
  });

  it('a connection dropped mid-answer is a retryable ENGINE_UNREACHABLE; the batch\'s next job succeeds', async () => {
    const { model } = await serve(['--drop-first', '1']);
    const [dropped, next] = (await model.run(imageJobs(2), () => {})).outputs;
    expect(dropped).toMatchObject({ ok: false, code: 'ENGINE_UNREACHABLE', retryable: true });
    ok(next);
  });

  it('an unknown server-side model (404) is a non-retryable ENGINE_FAILED naming it', async () => {
    const { model } = await serve(['--models', 'sd-turbo'], { model: 'sdxl' });
    const [output] = (await model.run(imageJobs(1), () => {})).outputs;
    expect(output).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: false });
    expect(messageOf(output)).toMatch(/404.*The model 'sdxl' does not exist/);
  });

  it('a slow server still delivers within the job\'s time; a cancel closes the request at once', async () => {
    const { model } = await serve(['--slow-ms', '1500']);
    const [job] = imageJobs(1);
    ok(((await model.run([{ ...job!, deadlineAt: Date.now() + 30_000 }], () => {})).outputs)[0]);
    const started = Date.now();
    setTimeout(() => model.cancel(['late0']), 200);
    const [cancelled] = (await model.run(imageJobs(1, {}, 'late'), () => {})).outputs;
    expect(cancelled).toMatchObject({ ok: false, code: 'CANCELLED', retryable: false });
    expect(Date.now() - started).toBeLessThan(1400);
  });

  it('sends the API key from the environment variable the settings name', async () => {
    const { standin, model } = await serve(['--api-key', 'sk-standin'], { apiKeyEnv: 'IMAGES_KEY' }, { IMAGES_KEY: 'sk-standin' });
    ok(((await model.run(imageJobs(1), () => {})).outputs)[0]);
    expect((await standin.stats<{ unauthorized: number }>()).unauthorized).toBe(0);
  });

  it('fails the load, with the server\'s words, when the key is refused (401), and names a variable that is not set', async () => {
    const standin = await startStandin('openai-images', ['--api-key', 'sk-standin']);
    standins.push(standin);
    await expect(new OpenAiImagesEngine({ env: { IMAGES_KEY: 'sk-wrong' } }).load(manifest({ url: standin.url, apiKeyEnv: 'IMAGES_KEY' }), '', cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false, message: expect.stringMatching(/401.*Incorrect API key/) });
    await expect(new OpenAiImagesEngine({ env: {} }).load(manifest({ url: standin.url, apiKeyEnv: 'IMAGES_KEY' }), '', cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', message: expect.stringMatching(/IMAGES_KEY, which is not set on this host/) });
  });

  it('refuses an API key written into the manifest', async () => {
    await expect(new OpenAiImagesEngine().load(manifest({ url: 'http://127.0.0.1:9', apiKey: 'sk-oops' }), '', cpuDevice(2048)))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false, message: expect.stringMatching(/settings\.apiKey: do not put a key in the manifest/) });
  });

  it('with promptExtras "sdcpp", the seed, steps and negative prompt ride in the prompt as <sd_cpp_extra_args>', async () => {
    const { standin, model } = await serve([], { promptExtras: 'sdcpp' });
    const outputs = (await model.run(imageJobs(2, { negativePrompt: 'blur' }), () => {})).outputs;
    outputs.forEach((output) => ok(output));
    const stats = await standin.stats<{ seeds: number[]; extraArgs: unknown[] }>();
    expect(stats.seeds).toEqual([20, 21]);
    expect(stats.extraArgs[0]).toEqual({ seed: 20, sample_params: { sample_steps: 4 }, negative_prompt: 'blur' });
    // The block was taken out of the prompt before generating.
    expect(standin.output()).toContain('for "a red fox 0"');
  });

  it('fetches the image when the server answers with a URL (response_format left out)', async () => {
    const { model } = await serve([], { sendResponseFormat: false });
    const file = ok(((await model.run(imageJobs(1, { width: 72, height: 72 }), () => {})).outputs)[0]).files[0]!;
    expect(await sharp(Buffer.from(file.bytes)).metadata()).toMatchObject({ format: 'png', width: 72, height: 72 });
  });

  it('runs up to maxInFlight requests at once, one output per job in order, progress counting finished images', async () => {
    const { standin, model } = await serve(['--slow-ms', '300'], { maxInFlight: 3 });
    const jobs = imageJobs(6);
    const progress: Progress[] = [];
    const outputs = (await model.run(jobs, (step) => progress.push(step))).outputs;
    expect(outputs.map((output) => ok(output).jobId)).toEqual(jobs.map((job) => job.id));
    expect((await standin.stats<{ maxInFlight: number }>()).maxInFlight).toBe(3);
    expect(progress.map((step) => step.step)).toEqual([1, 2, 3, 4, 5, 6]);
  });
});
