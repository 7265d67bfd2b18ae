/**
 * The HTTP engines against real image servers, on a machine that has them (a GPU host): the
 * contract's essentials (load, ordered PNG outputs of the asked size, rising progress, a cancel)
 * through the same adapters the agent uses. CI never runs this; the stand-ins cover the protocol.
 *
 *   SDCPP_URL=http://127.0.0.1:1234 node --import tsx scripts/real-engines.ts
 *   OPENAI_IMAGES_URL=http://127.0.0.1:4000 OPENAI_IMAGES_MODEL=sd-turbo OPENAI_IMAGES_KEY_ENV=LITELLM_KEY \
 *     node --import tsx scripts/real-engines.ts
 *
 * Environment: SDCPP_URL (an sd-server), SDCPP_API (auto|native|sdapi), OPENAI_IMAGES_URL, OPENAI_IMAGES_MODEL,
 * OPENAI_IMAGES_KEY_ENV (the name of the variable that holds the key), REAL_SIZE (default 512),
 * REAL_STEPS (default 4), REAL_TIMEOUT_MS (per job, default 600000). With no URL it says so and exits 0.
 */
import { cpuDevice } from '../src/agent/devices.js';
import type { Engine, EngineJob, JobOutput, Progress } from '../src/agent/core/engine.js';
import { OpenAiImagesEngine } from '../src/agent/engines/openai-images/index.js';
import { SdcppEngine } from '../src/agent/engines/sdcpp/index.js';
import type { ModelManifest } from '../src/protocol/index.js';

const size = Number(process.env.REAL_SIZE ?? 512);
const steps = Number(process.env.REAL_STEPS ?? 4);
const timeoutMs = Number(process.env.REAL_TIMEOUT_MS ?? 600_000);

interface Target {
  name: string;
  engine: Engine;
  settings: Record<string, unknown>;
}

const targets: Target[] = [];
if (process.env.SDCPP_URL) {
  targets.push({ name: 'sdcpp', engine: new SdcppEngine(), settings: { url: process.env.SDCPP_URL, api: process.env.SDCPP_API ?? 'auto', jobTimeoutMs: timeoutMs } });
}
if (process.env.OPENAI_IMAGES_URL) {
  targets.push({
    name: 'openai-images', engine: new OpenAiImagesEngine(),
    settings: {
      url: process.env.OPENAI_IMAGES_URL, jobTimeoutMs: timeoutMs,
      ...(process.env.OPENAI_IMAGES_MODEL ? { model: process.env.OPENAI_IMAGES_MODEL } : {}),
      ...(process.env.OPENAI_IMAGES_KEY_ENV ? { apiKeyEnv: process.env.OPENAI_IMAGES_KEY_ENV } : {}),
    },
  });
}
if (!targets.length) {
  console.log('real-engines: skipped. Set SDCPP_URL and/or OPENAI_IMAGES_URL to the servers to check (see the top of scripts/real-engines.ts).');
  process.exit(0);
}

const manifest = (target: Target): ModelManifest => ({
  name: `real-${target.name}`, version: '1', engine: target.engine.name, digest: `sha256:${'0'.repeat(64)}`,
  bytes: 0, memoryMB: 1, jobTypes: ['image'], params: { defaultSteps: steps }, settings: target.settings,
});
const jobs = (prefix: string, n: number): EngineJob[] => Array.from({ length: n }, (_, i) => ({
  id: `${prefix}${i}`, input: { prompt: `a lighthouse on a cliff at dusk, ${i}`, seed: 1000 + i, width: size, height: size, steps },
}));

const rows: { engine: string; check: string; result: string; ms: number }[] = [];
async function check(engine: string, name: string, fn: () => Promise<string>): Promise<void> {
  const started = performance.now();
  let result: string;
  try {
    result = await fn();
  } catch (error) {
    result = `FAIL ${(error as Error).message}`;
  }
  rows.push({ engine, check: name, result, ms: Math.round(performance.now() - started) });
}

const expect = (condition: boolean, message: string): void => {
  if (!condition) throw new Error(message);
};
const describeFailure = (output: JobOutput): string => (output.ok ? 'ok' : `${output.code}: ${output.message}`);

for (const target of targets) {
  let model: Awaited<ReturnType<Engine['load']>> | null = null;
  await check(target.name, 'load', async () => {
    model = await target.engine.load(manifest(target), '', cpuDevice(0));
    return `ok, ${model.memoryMB} MB`;
  });
  const loaded = model as Awaited<ReturnType<Engine['load']>> | null;
  if (!loaded) continue;
  await check(target.name, `batch of 2 (${size}x${size}, ${steps} steps)`, async () => {
    const batch = jobs('b', 2);
    const progress: Progress[] = [];
    const outputs = (await loaded.run(batch, (step) => progress.push(step))).outputs;
    expect(outputs.map((output) => output.jobId).join() === batch.map((job) => job.id).join(), 'outputs out of order');
    for (const output of outputs) {
      expect(output.ok, describeFailure(output));
      const file = (output as Extract<JobOutput, { ok: true }>).files[0]!;
      expect(file.mediaType === 'image/png' && file.width === size && file.height === size, `got a ${file.width}x${file.height} ${file.mediaType}`);
    }
    const rising = progress.every((step, i) => i === 0 || step.step > progress[i - 1]!.step);
    expect(rising && progress.length > 0, `progress did not rise: ${JSON.stringify(progress)}`);
    return `ok, ${progress.length} progress reports, last ${progress.at(-1)!.step}/${progress.at(-1)!.total}`;
  });
  await check(target.name, 'cancel the last of 3 after the first progress', async () => {
    const batch = jobs('c', 3);
    let cancelled = false;
    const outputs = (await loaded.run(batch, () => {
      if (!cancelled) loaded.cancel([batch[2]!.id]);
      cancelled = true;
    })).outputs;
    expect(!outputs[2]!.ok && outputs[2]!.code === 'CANCELLED', `the cancelled job: ${describeFailure(outputs[2]!)}`);
    expect(outputs[0]!.ok && outputs[1]!.ok, `the others: ${describeFailure(outputs[0]!)}; ${describeFailure(outputs[1]!)}`);
    return 'ok';
  });
  await loaded.unload();
  await target.engine.close();
}

const width = (key: keyof (typeof rows)[number]): number => Math.max(key.length, ...rows.map((row) => String(row[key]).length));
const keys = ['engine', 'check', 'result', 'ms'] as const;
console.log(keys.map((key) => key.padEnd(width(key))).join('  '));
for (const row of rows) console.log(keys.map((key) => String(row[key]).padEnd(width(key))).join('  '));
process.exit(rows.some((row) => row.result.startsWith('FAIL')) ? 1 : 0);
