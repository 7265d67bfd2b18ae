import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import sharp from 'sharp';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startKnobStandIn, type StandIn } from '../helpers/knob-standins.js';
import { removeDir, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { gpumesh, type Proc } from '../helpers/processes.js';

/**
 * The ComfyUI-compatible front door (docs/api.md, "ComfyUI-compatible API"), end to end: `gpumesh up` with its own
 * ComfyUI and a second host joined with another, each a ComfyUI stand-in (test/fixtures/standins/comfyui-standin.ts,
 * which answers as a real ComfyUI 0.3.x does, ../shared/ENGINES.md) whose owner lets the mesh run clients' workflows
 * there (`acceptWorkflows`). Clients are written as their projects write them: ComfyUI's own
 * script_examples/websockets_api_example.py (in Node, with the `ws` package), SillyTavern's and Open WebUI's ComfyUI
 * flows (../shared/ENGINES.md, "Clients of the front doors") — none sends credentials: the owner opened the door to a
 * loopback address (127.0.0.2, which these clients connect from), so their requests act as the door's narrowed grant,
 * and a request without credentials from anywhere else (127.0.0.1) is refused.
 */
let comfyA: StandIn;
let comfyB: StandIn;
let mesh: RunningMesh;
let second: Proc;
const data = tempDir('gpumesh-comfydoor-');

/** The websockets example's workflow (its checkpoint is the user's to edit: here one both hosts have). */
const EXAMPLE = {
  3: {
    class_type: 'KSampler',
    inputs: { cfg: 8, denoise: 1, latent_image: ['5', 0], model: ['4', 0], negative: ['7', 0], positive: ['6', 0], sampler_name: 'euler', scheduler: 'normal', seed: 8566257, steps: 20 },
  },
  4: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'standin-v1.safetensors' } },
  5: { class_type: 'EmptyLatentImage', inputs: { batch_size: 1, height: 32, width: 32 } },
  6: { class_type: 'CLIPTextEncode', inputs: { clip: ['4', 1], text: 'masterpiece best quality girl' } },
  7: { class_type: 'CLIPTextEncode', inputs: { clip: ['4', 1], text: 'bad hands' } },
  8: { class_type: 'VAEDecode', inputs: { samples: ['3', 0], vae: ['4', 2] } },
  9: { class_type: 'SaveImage', inputs: { filename_prefix: 'ComfyUI', images: ['8', 0] } },
};

/** The example's workflow with the client's own prompt, seed, steps and checkpoint. */
function workflow(text: string, seed: number, steps = 6, checkpoint = 'standin-v1.safetensors'): typeof EXAMPLE {
  const prompt = structuredClone(EXAMPLE);
  prompt[6].inputs.text = text;
  prompt[3].inputs.seed = seed;
  prompt[3].inputs.steps = steps;
  prompt[4].inputs.ckpt_name = checkpoint;
  return prompt;
}

/** Where the door's clients connect from: a loopback address the owner opened the door to. */
const CLIENT_ADDRESS = '127.0.0.2';

beforeAll(async () => {
  [comfyA, comfyB] = await Promise.all([
    startKnobStandIn('comfyui', ['--checkpoints', 'standin-v1.safetensors,only-a.safetensors']),
    startKnobStandIn('comfyui', ['--checkpoints', 'standin-v1.safetensors,only-b.safetensors']),
  ]);
  await Promise.all([comfyA.knobs({ stepMs: 15, previewEvery: 2 }), comfyB.knobs({ stepMs: 15, previewEvery: 2 })]);
  const owned = { acceptWorkflows: true, readyWaitMs: 5000, previewIntervalMs: 50 };
  mesh = await startMesh({
    data,
    config: {
      doors: { comfyui: { openTo: [`${CLIENT_ADDRESS}/32`], caveats: ['types workflow'] } },
      models: {
        // One model for every ComfyUI in the house: each host's owner says where its ComfyUI is, and that it takes workflows.
        comfy: { engine: 'comfyui', types: ['workflow'], memoryMB: 64, minReplicas: 2, settings: { url: comfyA.url, ...owned } },
      },
    },
  });
  const { token } = await mesh.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'second', classes: ['image'] });
  const dir = join(data, 'agents', 'second');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'host.yaml'), stringify({ models: { comfy: { settings: { url: comfyB.url, ...owned } } } }));
  second = gpumesh(['agent', '--join', mesh.url, '--grant', token, '--data', dir, '--cpu-budget', '2048']);
  // Both hosts said what their ComfyUIs offer: each one's own checkpoint is in the door's catalogue.
  await waitFor(async () => {
    const info = await (await door('/object_info/CheckpointLoaderSimple')).json() as any;
    const choices: string[] = info.CheckpointLoaderSimple?.input.required.ckpt_name[0] ?? [];
    return choices.includes('only-a.safetensors') && choices.includes('only-b.safetensors');
  }, { timeoutMs: 60_000, what: 'both hosts\' catalogues' });
}, 120_000);

afterAll(async () => {
  await second?.kill();
  await mesh?.stop();
  await Promise.all([comfyA?.stop(), comfyB?.stop()]);
  removeDir(data);
});

/**
 * A request to the mesh as the door's clients make it, without credentials, from CLIENT_ADDRESS (Node's fetch cannot
 * choose its source address; its Request still encodes the body — a string as text/plain, a FormData as multipart —
 * as fetch would send it).
 */
async function door(path: string, init: RequestInit = {}): Promise<Response> {
  const encoded = new Request(`${mesh.url}${path}`, init);
  const body = init.body === undefined ? null : Buffer.from(await encoded.arrayBuffer());
  return new Promise((resolve, reject) => {
    const request = httpRequest(encoded.url, { method: encoded.method, headers: Object.fromEntries(encoded.headers), localAddress: CLIENT_ADDRESS }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve(new Response(response.statusCode === 204 ? null : Buffer.concat(chunks), {
        status: response.statusCode!, headers: Object.entries(response.headers).flatMap(([name, value]) => [value ?? []].flat().map((item) => [name, item] as [string, string])),
      })));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(body);
  });
}

/** A client's WebSocket (from CLIENT_ADDRESS, without credentials), every message kept: JSON ones parsed, binary ones as they came. */
async function openSocket(clientId: string): Promise<{ socket: WebSocket; messages: any[]; frames: Buffer[]; until(check: (message: any) => boolean): Promise<void> }> {
  const socket = new WebSocket(`${mesh.url.replace('http', 'ws')}/ws?clientId=${clientId}`, { localAddress: CLIENT_ADDRESS });
  const messages: any[] = [];
  const frames: Buffer[] = [];
  const waiters: (() => void)[] = [];
  socket.on('message', (data, isBinary) => {
    if (isBinary) frames.push(Buffer.from(data as Buffer));
    else messages.push(JSON.parse(String(data)));
    for (const wake of waiters.splice(0)) wake();
  });
  await new Promise((resolve, reject) => {
    socket.once('open', resolve);
    socket.once('error', reject);
  });
  return {
    socket, messages, frames,
    async until(check) {
      const deadline = Date.now() + 60_000;
      while (!messages.some(check)) {
        if (Date.now() > deadline) throw new Error(`no such message among ${JSON.stringify(messages.map((message) => message.type))}`);
        await new Promise<void>((resolve) => {
          waiters.push(resolve);
          setTimeout(resolve, 500);
        });
      }
    },
  };
}

describe('a client written as ComfyUI\'s websockets_api_example.py', () => {
  it('opens /ws, queues a prompt under its own prompt_id (form-encoded, as urllib sends it), hears its progress and previews, reads /history and /view', async () => {
    const clientId = randomUUID();
    const ws = await openSocket(clientId);
    await ws.until((message) => message.type === 'status');
    expect(ws.messages[0]).toMatchObject({ type: 'status', data: { status: { exec_info: { queue_remaining: 0 } }, sid: clientId } });
    const promptId = randomUUID();
    // urllib.request.Request(url, data=…) with no header: POST, application/x-www-form-urlencoded.
    const queued = await door('/prompt', {
      method: 'POST', body: JSON.stringify({ prompt: workflow('masterpiece best quality man', 5, 24), client_id: clientId, prompt_id: promptId }),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(queued.status).toBe(200);
    expect(await queued.json()).toMatchObject({ prompt_id: promptId, number: expect.any(Number), node_errors: {} });
    await ws.until((message) => message.type === 'executing' && message.data.node === null && message.data.prompt_id === promptId);
    ws.socket.close();
    const types = ws.messages.map((message) => message.type);
    expect(types).toContain('execution_start');
    expect(types.indexOf('execution_success')).toBeLessThan(types.lastIndexOf('executing'));
    const progress = ws.messages.filter((message) => message.type === 'progress');
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1).data).toMatchObject({ max: 24, prompt_id: promptId, node: '3' });
    // Previews as ComfyUI frames them: PREVIEW_IMAGE (1), PNG (2), then the picture.
    expect(ws.frames.length).toBeGreaterThan(0);
    for (const frame of ws.frames) {
      expect([frame.readUInt32BE(0), frame.readUInt32BE(4)]).toEqual([1, 2]);
      expect((await sharp(frame.subarray(8)).metadata()).format).toBe('png');
    }
    const executed = ws.messages.find((message) => message.type === 'executed');
    expect(executed.data).toMatchObject({ node: '9', prompt_id: promptId, output: { images: [{ subfolder: '', type: 'output' }] } });

    const history = (await (await door(`/history/${promptId}`)).json() as any)[promptId];
    expect(history.status).toMatchObject({ status_str: 'success', completed: true });
    expect(history.prompt[1]).toBe(promptId);
    expect(history.prompt[2]['6'].inputs.text).toBe('masterpiece best quality man');
    for (const image of history.outputs['9'].images) {
      const response = await door(`/view?${new URLSearchParams({ filename: image.filename, subfolder: image.subfolder, type: image.type })}`);
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe('image/png');
      expect(await sharp(Buffer.from(await response.arrayBuffer())).metadata()).toMatchObject({ format: 'png', width: 32, height: 32 });
    }
  }, 90_000);
});

describe('every ComfyUI in the house as one', () => {
  it('two hosts, each with its ComfyUI, share a burst of prompts', async () => {
    const before = await Promise.all([comfyA, comfyB].map(async (comfy) => (await comfy.state<{ submitted: string[] }>()).submitted.length));
    const ids: string[] = [];
    for (let index = 0; index < 8; index++) {
      const answer = await door('/prompt', { method: 'POST', body: JSON.stringify({ prompt: workflow(`burst ${index}`, index, 8) }), headers: { 'content-type': 'application/json' } });
      expect(answer.status).toBe(200);
      ids.push(((await answer.json()) as { prompt_id: string }).prompt_id);
    }
    for (const id of ids) {
      await waitFor(async () => ((await (await door(`/history/${id}`)).json()) as Record<string, { status: { status_str: string } }>)[id], { timeoutMs: 60_000, what: `prompt ${id}` });
      expect(((await (await door(`/history/${id}`)).json()) as any)[id].status.status_str).toBe('success');
    }
    const after = await Promise.all([comfyA, comfyB].map(async (comfy) => (await comfy.state<{ submitted: string[] }>()).submitted.length));
    expect(after[0]! - before[0]!).toBeGreaterThan(0);
    expect(after[1]! - before[1]!).toBeGreaterThan(0);
    expect(after[0]! - before[0]! + after[1]! - before[1]!).toBe(8);
  }, 120_000);

  it('a prompt naming a checkpoint only one host has runs there; a node no host has is refused at once, in ComfyUI\'s words', async () => {
    const before = await Promise.all([comfyA, comfyB].map(async (comfy) => (await comfy.state<{ submitted: string[] }>()).submitted.length));
    const answer = await door('/prompt', { method: 'POST', body: JSON.stringify({ prompt: workflow('only on b', 1, 2, 'only-b.safetensors') }) });
    const { prompt_id: id } = await answer.json() as { prompt_id: string };
    await waitFor(async () => ((await (await door(`/history/${id}`)).json()) as Record<string, unknown>)[id], { timeoutMs: 60_000, what: 'the prompt on b' });
    const after = await Promise.all([comfyA, comfyB].map(async (comfy) => (await comfy.state<{ submitted: string[] }>()).submitted.length));
    expect([after[0]! - before[0]!, after[1]! - before[1]!]).toEqual([0, 1]);

    const missing = await door('/prompt', { method: 'POST', body: JSON.stringify({ prompt: { ...workflow('nowhere', 1), 10: { class_type: 'NoSuchNode', inputs: {} } } }) });
    expect(missing.status).toBe(400);
    expect(await missing.json()).toEqual({
      error: { type: 'invalid_prompt', message: 'Cannot execute because node NoSuchNode does not exist.', details: 'Node ID \'#10\'', extra_info: {} }, node_errors: {},
    });
    const unknownModel = await door('/prompt', { method: 'POST', body: JSON.stringify({ prompt: workflow('no such checkpoint', 1, 2, 'nowhere.safetensors') }) });
    expect(unknownModel.status).toBe(400);
    const refused = await unknownModel.json() as any;
    expect(refused.error.type).toBe('prompt_outputs_failed_validation');
    expect(refused.node_errors['4']).toMatchObject({ class_type: 'CheckpointLoaderSimple', errors: [{ type: 'value_not_in_list', extra_info: { input_name: 'ckpt_name' } }] });
  }, 90_000);

  it('a picture uploaded through /upload/image reaches the host\'s ComfyUI, under the job\'s own name, for its LoadImage', async () => {
    const picture = await sharp({ create: { width: 20, height: 12, channels: 3, background: { r: 200, g: 40, b: 90 } } }).png().toBuffer();
    const form = new FormData();
    form.append('image', new Blob([new Uint8Array(picture)], { type: 'image/png' }), 'photo.png');
    form.append('overwrite', 'true');
    const uploaded = await door('/upload/image', { method: 'POST', body: form });
    expect(uploaded.status).toBe(200);
    const { name, subfolder, type } = await uploaded.json() as { name: string; subfolder: string; type: string };
    expect({ subfolder, type }).toEqual({ subfolder: '', type: 'input' });
    expect(name).toMatch(/^[0-9a-f]{64}\.png$/);
    const back = await door(`/view?filename=${name}&type=input`);
    expect(Buffer.from(await back.arrayBuffer()).equals(picture)).toBe(true);

    const invert = {
      1: { class_type: 'LoadImage', inputs: { image: name } },
      2: { class_type: 'ImageInvert', inputs: { image: ['1', 0] } },
      3: { class_type: 'SaveImage', inputs: { images: ['2', 0], filename_prefix: 'inverted' } },
    };
    const { prompt_id: id } = await (await door('/prompt', { method: 'POST', body: JSON.stringify({ prompt: invert }) })).json() as { prompt_id: string };
    const entry = await waitFor(async () => ((await (await door(`/history/${id}`)).json()) as Record<string, any>)[id], { timeoutMs: 60_000, what: 'the inverted picture' });
    expect(entry.status.status_str).toBe('success');
    const states = await Promise.all([comfyA, comfyB].map((comfy) => comfy.state<{ uploads: string[]; received: string[] }>()));
    const ran = states.find((state) => state.received.some((text) => text.includes('ImageInvert')))!;
    const sent = JSON.parse(ran.received.findLast((text) => text.includes('ImageInvert'))!);
    expect(sent['1'].inputs.image).toMatch(/^gpumesh\/gpumesh-j_[\w-]+-0\.png$/);
    expect(ran.uploads).toContain(sent['1'].inputs.image);
    const file = entry.outputs['3'].images[0];
    const inverted = await sharp(Buffer.from(await (await door(`/view?filename=${file.filename}&subfolder=&type=output`)).arrayBuffer())).removeAlpha().raw().toBuffer();
    expect([...inverted.subarray(0, 3)]).toEqual([55, 215, 165]);
  }, 90_000);
});

describe('clients as they are', () => {
  it('SillyTavern: system_stats, object_info, a text/plain prompt without client_id, the whole /history polled, /view', async () => {
    expect((await door('/system_stats')).status).toBe(200);
    const info = await (await door('/object_info')).json() as any;
    expect(info.KSampler.input.required.sampler_name[0]).toContain('euler');
    expect(info.KSampler.input.required.scheduler[0]).toContain('karras');
    expect(info.CheckpointLoaderSimple.input.required.ckpt_name[0]).toEqual(expect.arrayContaining(['standin-v1.safetensors', 'only-a.safetensors', 'only-b.safetensors']));
    // fetch(url, {method: 'POST', body: <string>}): text/plain;charset=UTF-8.
    const queued = await door('/prompt', { method: 'POST', body: JSON.stringify({ prompt: workflow('a tavern', 7, 4) }) });
    expect(queued.status).toBe(200);
    const { prompt_id: id } = await queued.json() as { prompt_id: string };
    let item: any;
    for (let polls = 0; !item; polls++) {
      expect(polls).toBeLessThan(600);
      const history = await door('/history');
      expect(history.ok).toBe(true);
      item = ((await history.json()) as Record<string, unknown>)[id];
      if (!item) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(item.status.status_str).not.toBe('error');
    const image = Object.keys(item.outputs).map((node) => item.outputs[node].images).flat()[0];
    const picture = await door(`/view?filename=${image.filename}&subfolder=${image.subfolder}&type=${image.type}`);
    expect(picture.ok).toBe(true);
    expect(Buffer.from(await picture.arrayBuffer()).toString('base64').length).toBeGreaterThan(100);
  }, 90_000);

  it('Open WebUI: the socket first, {prompt, client_id}, executing with node null, /history/{id}, /view answering image/*', async () => {
    const clientId = randomUUID();
    const ws = await openSocket(clientId);
    const queued = await door('/prompt', { method: 'POST', body: JSON.stringify({ prompt: workflow('an open web', 9, 4), client_id: clientId }), headers: { 'content-type': 'application/json' } });
    const { prompt_id: id } = await queued.json() as { prompt_id: string };
    await ws.until((message) => message.type === 'executing' && message.data.node === null && message.data.prompt_id === id);
    ws.socket.close();
    const history = (await (await door(`/history/${id}`)).json() as any)[id];
    const images = Object.entries(history.outputs as Record<string, { images: { filename: string; subfolder: string; type: string }[] }>)
      .filter(([node]) => ['SaveImage', 'PreviewImage'].includes(history.prompt[2][node].class_type)).flatMap(([, output]) => output.images);
    expect(images.length).toBe(1);
    const response = await door(`/view?${new URLSearchParams({ filename: images[0]!.filename, subfolder: images[0]!.subfolder, type: images[0]!.type })}`);
    expect(response.headers.get('content-type')).toMatch(/^image\//);
  }, 90_000);
});

describe('credentials', () => {
  const body = JSON.stringify({ prompt: workflow('not mine to ask', 1) });

  it('a grant that may not submit workflows gets 403, in ComfyUI\'s shape, as Bearer or as HTTP Basic\'s password; one that may gets in', async () => {
    const { token } = await mesh.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'client', types: ['image'] });
    for (const authorization of [`Bearer ${token}`, `Basic ${Buffer.from(`user:${token}`).toString('base64')}`]) {
      const refused = await fetch(`${mesh.url}/prompt`, { method: 'POST', body, headers: { authorization } });
      expect(refused.status).toBe(403);
      expect(((await refused.json()) as any).error).toMatchObject({ type: 'grant_denied', extra_info: { code: 'GRANT_DENIED' } });
    }
    // A grant that may, from where the door is not open: its own credentials carry it.
    const allowed = await fetch(`${mesh.url}/prompt`, { method: 'POST', body, headers: { authorization: `Bearer ${mesh.admin}` } });
    expect(allowed.status).toBe(200);
  });

  it('no credentials from a network the door is not open to: 401 with a Basic challenge, in ComfyUI\'s shape; the socket too', async () => {
    const anonymous = await fetch(`${mesh.url}/prompt`, { method: 'POST', body });
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toMatch(/^Basic /);
    expect(((await anonymous.json()) as any).error.type).toBe('grant_missing');
    const socket = new WebSocket(`${mesh.url.replace('http', 'ws')}/ws?clientId=x`);
    const status = await new Promise<number>((resolve) => socket.on('unexpected-response', (_request, response) => resolve(response.statusCode!)));
    expect(status).toBe(401);
  });
});
