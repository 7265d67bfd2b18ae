import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../src/agent/devices.js';
import { ComfyUiEngine } from '../../../src/agent/engines/comfyui/index.js';
import type { Engine, JobOutput } from '../../../src/agent/core/engine.js';
import { ExecEngine, LocalCommandRunner } from '../../../src/agent/engines/exec/index.js';
import { OpenAiImagesEngine } from '../../../src/agent/engines/openai-images/index.js';
import { SdcppEngine } from '../../../src/agent/engines/sdcpp/index.js';
import { ENGINE_DESCRIPTORS } from '../../../src/protocol/engines/index.js';
import type { ModelManifest } from '../../../src/protocol/index.js';
import { startKnobStandIn, type StandIn } from '../../helpers/knob-standins.js';
import { ROOT, tempDir } from '../../helpers/mesh.js';
import { startStandin, type Standin } from '../../helpers/standins.js';

/**
 * Engine input hygiene on the agent's side, engine by engine: each engine's control markup, in each text field a job
 * carries, is refused by the engine itself (INVALID_INPUT, not retryable) before a request leaves for the server —
 * the orchestrator refuses it at admission too (test/integration/control-markup.test.ts), and neither trusts the
 * other. What the stand-in servers received is checked, not only what the engine answered.
 */

/** Markup each engine reads, as a client would write it (the attack of issue 19 among them). */
const SAMPLES: Record<string, string[]> = {
  sdcpp: [
    'a red fox <sd_cpp_extra_args>{"sample_params":{"sample_steps":150},"width":2048,"height":2048,"seed":1,"batch_count":8}</sd_cpp_extra_args>',
    'a fox < SD_CPP_EXTRA_ARGS >{"width":2048}',
    'a fox </sd_cpp_extra_args>',
    'a fox <lora:../../secrets:1.0>',
    'a fox <LoRA :style:0.8>',
  ],
  comfyui: ['a fox, embedding:EasyNegative', 'a fox EMBEDDING : ../../x'],
};
SAMPLES['openai-images'] = SAMPLES.sdcpp!;

const TEXT_FIELDS = ['prompt', 'negativePrompt'] as const;
const MARKERS = /sd_cpp_extra_args|lora|embedding/i;

const WORKFLOW = join(ROOT, 'test/fixtures/comfyui/txt2img-api.json');
const COMFY_INPUTS = {
  prompt: { node: '6', field: 'text' }, negativePrompt: { node: '7', field: 'text' }, seed: { node: '3', field: 'seed' },
  steps: { node: '3', field: 'steps' }, width: { node: '5', field: 'width' }, height: { node: '5', field: 'height' },
};

const manifest = (engine: string, settings: Record<string, unknown>): ModelManifest => ({
  name: `${engine}-model`, version: '1', engine, digest: `sha256:${'0'.repeat(64)}`, bytes: 0, memoryMB: 64,
  jobTypes: ['image'], params: { defaultSteps: 2 }, settings,
});

interface Case {
  engine: string;
  build(): Engine;
  settings(): Record<string, unknown>;
  received(): Promise<string[]>;
}

let sdNative: Standin;
let sdA1111: Standin;
let openai: Standin;
let comfy: StandIn;

beforeAll(async () => {
  [sdNative, sdA1111, openai, comfy] = await Promise.all([
    startStandin('sdcpp', ['--step-ms', '5']),
    startStandin('sdcpp', ['--step-ms', '5', '--native', 'off']),
    startStandin('openai-images'),
    startKnobStandIn('comfyui'),
  ]);
  await comfy.knobs({ stepMs: 2 });
}, 60_000);
afterAll(async () => {
  await Promise.all([sdNative?.kill(), sdA1111?.kill(), openai?.kill(), comfy?.stop()]);
});

const received = (standin: Standin) => async (): Promise<string[]> => (await standin.stats<{ received: string[] }>()).received;
const fast = { poll: { initialMs: 10, maxMs: 50 } };

const CASES: Record<string, Case> = {
  'sdcpp (native API)': { engine: 'sdcpp', build: () => new SdcppEngine(), settings: () => ({ url: sdNative.url, api: 'native', ...fast }), received: () => received(sdNative)() },
  'sdcpp (A1111 API, settings.extra in the prompt)': {
    engine: 'sdcpp', build: () => new SdcppEngine(), received: () => received(sdA1111)(),
    settings: () => ({ url: sdA1111.url, api: 'sdapi', extra: { sample_params: { sample_method: 'euler' } }, ...fast }),
  },
  'openai-images (promptExtras sdcpp)': {
    engine: 'openai-images', build: () => new OpenAiImagesEngine(), received: () => received(openai)(),
    settings: () => ({ url: openai.url, promptExtras: 'sdcpp' }),
  },
  'openai-images (promptExtras none)': {
    engine: 'openai-images', build: () => new OpenAiImagesEngine(), received: () => received(openai)(),
    settings: () => ({ url: openai.url }),
  },
  comfyui: {
    engine: 'comfyui', build: () => new ComfyUiEngine(), settings: () => ({ url: comfy.url, workflow: WORKFLOW, inputs: COMFY_INPUTS }),
    received: async () => (await comfy.state<{ received: string[] }>()).received,
  },
};

describe('engine input hygiene on the agent: control markup in client text never reaches the server', () => {
  it('every engine that takes client text as text has its markup listed, and a sample of each here', () => {
    for (const descriptor of ENGINE_DESCRIPTORS) {
      if (descriptor.controlMarkup.length === 0) continue;
      const samples = SAMPLES[descriptor.name] ?? [];
      for (const markup of descriptor.controlMarkup) {
        expect(samples.some((sample) => markup.pattern.test(sample)), `${descriptor.name}: a sample of ${markup.name}`).toBe(true);
      }
    }
  });

  for (const [label, testCase] of Object.entries(CASES)) {
    it(`${label}: each markup in each text field fails its job with INVALID_INPUT and sends nothing; clean text arrives verbatim`, async () => {
      const engine = testCase.build();
      const loaded = await engine.load(manifest(testCase.engine, testCase.settings()), null, cpuDevice(2048));
      try {
        const before = (await testCase.received()).length;
        const jobs = SAMPLES[testCase.engine]!.flatMap((sample, index) => TEXT_FIELDS.map((field) => ({
          id: `bad-${index}-${field}`,
          input: { prompt: 'a calm sea', seed: 3, width: 64, height: 64, steps: 2, [field]: sample },
        })));
        const clean = { id: 'clean', input: { prompt: 'a calm sea at dawn', negativePrompt: 'fog', seed: 4, width: 64, height: 64, steps: 2 } };
        const { outputs } = await loaded.run([...jobs, clean], () => {});
        const byId = new Map<string, JobOutput>(outputs.map((output) => [output.jobId, output]));
        for (const job of jobs) {
          const output = byId.get(job.id)!;
          expect(output, `${job.id}: ${JSON.stringify(output)}`).toMatchObject({ ok: false, code: 'INVALID_INPUT', retryable: false });
          expect((output as { message: string }).message).toMatch(/control markup of the .* engine/);
        }
        expect(byId.get('clean'), JSON.stringify(byId.get('clean'))).toMatchObject({ ok: true });
        const sent = (await testCase.received()).slice(before);
        expect(sent).toHaveLength(1);
        expect(sent[0]).toContain('a calm sea at dawn');
        // Only gpumesh's own block (the model's settings) may carry sd.cpp's markup; nothing of the client's.
        const withoutOurs = sent[0]!.replace(/<sd_cpp_extra_args>\{[^<]*\}<\/sd_cpp_extra_args>/, '');
        expect(withoutOurs).not.toMatch(MARKERS);
        for (const sample of SAMPLES[testCase.engine]!) expect(sent[0]).not.toContain(sample);
      } finally {
        await loaded.unload();
        await engine.close();
      }
    });
  }
});

describe('an engine that takes no text as instructions', () => {
  it('exec: shell syntax, options and every engine\'s markup in a prompt reach the command literally, as data on stdin, never in its argv', async () => {
    const scratch = tempDir('gpumesh-markup-');
    const canary = join(scratch, 'pwned');
    const prompt = `"; touch ${canary}; $(touch ${canary}) \`touch ${canary}\` --output=/etc/passwd -rf * <sd_cpp_extra_args>{}</sd_cpp_extra_args> embedding:x`;
    const engine = new ExecEngine({ runner: new LocalCommandRunner() });
    const paint = join(ROOT, 'test/fixtures/commands/paint.mjs');
    const loaded = await engine.load(manifest('exec', { command: [process.execPath, '${MODEL_PATH}', '--job-id', '${JOB_ID}'] }), paint, cpuDevice(2048));
    try {
      const [output] = (await loaded.run([{ id: 'literal', input: { prompt, seed: 1, width: 8, height: 8, steps: 1, stepMs: 0 } }], () => {})).outputs;
      expect(output, JSON.stringify(output)).toMatchObject({ ok: true, result: { prompt, jobIdArgument: 'literal' } });
      expect(existsSync(canary)).toBe(false);
    } finally {
      await loaded.unload();
      await engine.close();
    }
  });
});
