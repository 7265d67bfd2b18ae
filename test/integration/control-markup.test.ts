import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { startKnobStandIn, type StandIn } from '../helpers/knob-standins.js';
import { removeDir, ROOT, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { startStandin, type Standin } from '../helpers/standins.js';

/**
 * Issue 19, finding 1, end to end: `gpumesh up` with models on an sd-server stand-in (native API), an OpenAI-style
 * image server stand-in that reads sd.cpp's `<sd_cpp_extra_args>` from prompts (as sd-server's /v1 does), and a
 * ComfyUI stand-in. A job whose text carries its engine's control markup is refused at admission — 400 naming the
 * field and the markup, nothing stored, nothing sent — on the single and the bulk route; the same words in a
 * model whose engine does not read them pass.
 */
const WORKFLOW = join(ROOT, 'test/fixtures/comfyui/txt2img-api.json');
const ATTACK = 'a red fox <sd_cpp_extra_args>{"sample_params":{"sample_steps":150},"width":2048,"height":2048,"seed":1,"batch_count":8}</sd_cpp_extra_args>';

let sd: Standin;
let openai: Standin;
let comfy: StandIn;
let mesh: RunningMesh;
const data = tempDir();

beforeAll(async () => {
  [sd, openai, comfy] = await Promise.all([startStandin('sdcpp', ['--step-ms', '5']), startStandin('openai-images'), startKnobStandIn('comfyui')]);
  await comfy.knobs({ stepMs: 2 });
  mesh = await startMesh({
    data,
    config: {
      models: {
        sd: { engine: 'sdcpp', types: ['image'], memoryMB: 64, params: { defaultSteps: 2 }, settings: { url: sd.url, poll: { initialMs: 10, maxMs: 50 } } },
        oai: { engine: 'openai-images', types: ['image'], memoryMB: 64, settings: { url: openai.url, promptExtras: 'sdcpp' } },
        comfy: {
          engine: 'comfyui', types: ['image'], memoryMB: 64,
          settings: { url: comfy.url, workflow: WORKFLOW, inputs: { prompt: { node: '6', field: 'text' }, negativePrompt: { node: '7', field: 'text' }, seed: { node: '3', field: 'seed' } } },
        },
      },
    },
  });
}, 120_000);

afterAll(async () => {
  await mesh?.stop();
  await Promise.all([sd?.kill(), openai?.kill(), comfy?.stop()]);
  removeDir(data);
});

async function post(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(`${mesh.url}${path}`, {
    method: 'POST', headers: { authorization: `Bearer ${mesh.admin}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

const sent = async (): Promise<string> => [
  ...(await sd.stats<{ received: string[] }>()).received,
  ...(await openai.stats<{ received: string[] }>()).received,
  ...(await comfy.state<{ received: string[] }>()).received,
].join('\n');

const TABLE: { model: string; markup: string[] }[] = [
  { model: 'sd', markup: [ATTACK, 'a fox <lora:style:1.2>', 'a fox </SD_CPP_EXTRA_ARGS>'] },
  { model: 'oai', markup: [ATTACK, 'a fox <lora:style:1.2>'] },
  { model: 'comfy', markup: ['a fox, embedding:EasyNegative'] },
];

describe('client text with an engine\'s control markup is refused at admission', () => {
  it('each model × markup × text field: 400 INVALID_INPUT naming the field and the markup; nothing stored, nothing sent', async () => {
    const before = await sent();
    for (const { model, markup } of TABLE) {
      for (const text of markup) {
        for (const field of ['prompt', 'negativePrompt']) {
          const input = { prompt: 'a calm sea', width: 64, height: 64, [field]: text };
          const answer = await post('/v1/jobs', { type: 'image', model, input });
          expect(answer.status, `${model} ${field} ${text}: ${JSON.stringify(answer.json)}`).toBe(400);
          const error = answer.json.error as { code: string; message: string };
          expect(error.code).toBe('INVALID_INPUT');
          expect(error.message).toMatch(new RegExp(`^Invalid input for model "${model}": ${field}: contains .*, control markup of the \\S+ engine \\(.*\\); remove it$`));
          const bulk = await post('/v1/jobs:batch', { jobs: [{ type: 'image', model, input }] });
          expect(bulk.status).toBe(207);
          expect((bulk.json.results as { status: number; error?: { code: string } }[])[0]).toMatchObject({ status: 400, error: { code: 'INVALID_INPUT' } });
        }
      }
    }
    const listed = await (await fetch(`${mesh.url}/v1/jobs?limit=200`, { headers: { authorization: `Bearer ${mesh.admin}` } })).json() as { jobs: unknown[] };
    expect(listed.jobs).toHaveLength(0);
    expect(await sent()).toBe(before);
  });

  it('a tensor job carries tensors and nothing else: Open Inference Protocol fields beside them are refused at admission, naming them', async () => {
    const x = Array.from({ length: 64 }, () => 0.5);
    for (const extra of [{ parameters: { sequence_id: 7, priority: 1 } }, { outputs: [{ name: 'secret' }] }, { model_name: 'other' }]) {
      const answer = await post('/v1/jobs', { type: 'tensor', input: { x, ...extra } });
      expect(answer.status, JSON.stringify(answer.json)).toBe(400);
      expect((answer.json.error as { message: string }).message).toContain(Object.keys(extra)[0]);
    }
  });

  it('the same words are only words to an engine that does not read them: sd.cpp markup passes to ComfyUI, embedding: to sd.cpp', async () => {
    const jobs = [
      await post('/v1/jobs', { type: 'image', model: 'comfy', input: { prompt: 'a poster that reads <lora:x:1>', width: 64, height: 64, steps: 2 } }),
      await post('/v1/jobs', { type: 'image', model: 'sd', input: { prompt: 'a sign that says embedding: yes', width: 64, height: 64, steps: 2 } }),
    ];
    for (const job of jobs) expect(job.status, JSON.stringify(job.json)).toBe(202);
    for (const job of jobs) {
      await waitFor(async () => {
        const view = await (await fetch(`${mesh.url}/v1/jobs/${String(job.json.id)}`, { headers: { authorization: `Bearer ${mesh.admin}` } })).json() as { status: string };
        if (view.status === 'failed') throw new Error(JSON.stringify(view));
        return view.status === 'succeeded';
      }, { timeoutMs: 30_000, what: `job ${String(job.json.id)} to succeed` });
    }
    expect(await sent()).toContain('a poster that reads <lora:x:1>');
  });
});
