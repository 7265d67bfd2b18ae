import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobEvent } from '../../src/protocol/api/index.js';
import { groupRssMB } from '../../src/agent/governance/process-memory.js';
import { startKnobStandIn, type StandIn } from '../helpers/knob-standins.js';
import { removeDir, ROOT, startMesh, tempDir, TSX_LOADER, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { childrenOf } from '../helpers/procfs.js';

/**
 * The ComfyUI adapter as a real ComfyUI 0.3.x behaves (../shared/ENGINES.md), end to end: `gpumesh up` and its
 * agent in front of the ComfyUI stand-in (test/fixtures/standins/comfyui-standin.ts), which speaks as the real server
 * was seen to — uploads, binary preview frames, `progress_state`, multi-line errors with its own paths, the CPU's
 * machine-wide `vram_*`, a restart that refuses connections for seconds. One check per finding of issue 33.
 */
const STANDIN = join(ROOT, 'test/fixtures/standins/comfyui-standin.ts');
const TXT2IMG = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/comfyui/txt2img-api.json'), 'utf8')) as Record<string, { class_type: string; inputs: Record<string, unknown> }>;
const TXT2IMG_INPUTS = {
  prompt: { node: '6', field: 'text' }, seed: { node: '3', field: 'seed' }, steps: { node: '3', field: 'steps' },
  width: { node: '5', field: 'width' }, height: { node: '5', field: 'height' },
};

/** LoadImage → ImageInvert → SaveImage, and LoadImageMask (alpha) → MaskToImage → SaveImage: the picture and mask as ComfyUI read them. */
const EDIT = {
  1: { class_type: 'LoadImage', inputs: { image: 'example.png' } },
  2: { class_type: 'ImageInvert', inputs: { image: ['1', 0] } },
  3: { class_type: 'SaveImage', inputs: { images: ['2', 0], filename_prefix: 'gpumesh/edit' } },
  4: { class_type: 'LoadImageMask', inputs: { image: 'example.png', channel: 'alpha' } },
  5: { class_type: 'MaskToImage', inputs: { mask: ['4', 0] } },
  6: { class_type: 'SaveImage', inputs: { images: ['5', 0], filename_prefix: 'gpumesh/mask' } },
};

/** A refiner: a second sampler of 7 steps after the first (4 by the job), each reporting its own 1…max. */
const TWO_SAMPLERS = {
  ...TXT2IMG,
  10: { class_type: 'KSampler', inputs: { ...TXT2IMG['3']!.inputs, steps: 7, latent_image: ['3', 0] } },
  8: { class_type: 'VAEDecode', inputs: { samples: ['10', 0], vae: ['4', 2] } },
};

/** A SaveImage whose prefix climbs out of the output folder: ComfyUI refuses it with a message full of its own paths. */
const OUTSIDE = { ...TXT2IMG, 9: { class_type: 'SaveImage', inputs: { images: ['8', 0], filename_prefix: '../../outside/x' } } };

let comfy: StandIn;
let mesh: RunningMesh;
const data = tempDir();

beforeAll(async () => {
  comfy = await startKnobStandIn('comfyui');
  await comfy.knobs({ stepMs: 15 });
  const fronted = (workflow: unknown, inputs: Record<string, unknown>, more: Record<string, unknown> = {}) => ({
    engine: 'comfyui', types: ['image'], memoryMB: 64, settings: { url: comfy.url, workflow, inputs, readyWaitMs: 20_000, previewIntervalMs: 100, ...more },
  });
  mesh = await startMesh({
    data,
    config: {
      // Room for a 6 s restart in an attempt's time: readyWaitMs stays below the attempt timeout (docs/operations.md).
      health: { attemptTimeout: { floorMs: 30_000 } },
      models: {
        comfy: fronted(TXT2IMG, TXT2IMG_INPUTS),
        'comfy-edit': fronted(EDIT, { image: { node: '1', field: 'image' }, mask: { node: '4', field: 'image' } }),
        'comfy-refiner': fronted(TWO_SAMPLERS, TXT2IMG_INPUTS),
        'comfy-outside': fronted(OUTSIDE, TXT2IMG_INPUTS),
        'comfy-managed': {
          engine: 'comfyui', types: ['image'], memoryMB: 16,
          settings: {
            command: `'${process.execPath}' --import ${TSX_LOADER} '${STANDIN}' --port \${PORT}`,
            readiness: { http: '/system_stats', timeoutMs: 60_000, intervalMs: 100 },
            workflow: TXT2IMG, inputs: TXT2IMG_INPUTS,
          },
        },
      },
    },
  });
}, 120_000);

afterAll(async () => {
  await mesh?.stop();
  await comfy?.stop();
  removeDir(data);
});

const digestOf = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: any }> {
  const response = await fetch(`${mesh.url}${path}`, {
    method, headers: { authorization: `Bearer ${mesh.admin}`, ...(body === undefined || body instanceof Uint8Array ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : body instanceof Uint8Array ? Uint8Array.from(body) : JSON.stringify(body),
  });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, json };
}

/** Submit an image job and follow it to its end: the job and every event it had. */
async function run(model: string, input: Record<string, unknown>): Promise<{ job: any; events: JobEvent[] }> {
  const submitted = await call('POST', '/v1/jobs', { type: 'image', model, input: { seed: 5, width: 32, height: 32, ...input } });
  expect(submitted.status, JSON.stringify(submitted.json)).toBe(202);
  const events: JobEvent[] = [];
  const response = await fetch(`${mesh.url}/v1/jobs/${submitted.json.id}/events`, { headers: { authorization: `Bearer ${mesh.admin}` } });
  const decoder = new TextDecoder();
  let buffer = '';
  outer: for await (const chunk of response.body!) {
    buffer += decoder.decode(chunk as Uint8Array, { stream: true });
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const text = buffer.slice(0, end).split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trim()).join('\n');
      buffer = buffer.slice(end + 2);
      if (!text) continue;
      const event = JSON.parse(text) as JobEvent;
      events.push(event);
      if (['succeeded', 'failed', 'cancelled', 'expired'].includes(event.type)) break outer;
    }
  }
  return { job: (await call('GET', `/v1/jobs/${submitted.json.id}`)).json, events };
}

const artifact = async (job: any, index = 0): Promise<Buffer> =>
  Buffer.from(await (await fetch(`${mesh.url}/v1/blobs/${job.artifacts[index].digest}`, { headers: { authorization: `Bearer ${mesh.admin}` } })).arrayBuffer());

describe('1. pictures in', () => {
  it('a picture and its mask reach ComfyUI: uploaded under the job\'s names, wired into LoadImage and LoadImageMask, read as sent', async () => {
    const picture = await sharp({ create: { width: 24, height: 16, channels: 3, background: { r: 200, g: 40, b: 90 } } }).png().toBuffer();
    // The left half transparent: what to repaint.
    const alpha = Buffer.alloc(24 * 16, 255);
    for (let y = 0; y < 16; y++) alpha.fill(0, y * 24, y * 24 + 12);
    const mask = await sharp(Buffer.alloc(24 * 16 * 3), { raw: { width: 24, height: 16, channels: 3 } }).joinChannel(alpha, { raw: { width: 24, height: 16, channels: 1 } }).png().toBuffer();
    for (const bytes of [picture, mask]) expect((await call('PUT', '/v1/blobs', new Uint8Array(bytes), { 'content-type': 'application/octet-stream' })).status).toBeLessThan(300);

    const { job } = await run('comfy-edit', { prompt: 'invert it', image: digestOf(picture), mask: digestOf(mask), width: 24, height: 16 });
    expect(job.status, JSON.stringify(job.error)).toBe('succeeded');
    const uploads = (await comfy.state<{ uploads: string[] }>()).uploads;
    expect(uploads).toEqual([`gpumesh/gpumesh-${job.id}-image.png`, `gpumesh/gpumesh-${job.id}-mask.png`]);
    const received = JSON.parse((await comfy.state<{ received: string[] }>()).received.at(-1)!);
    expect(received['1'].inputs.image).toBe(uploads[0]);
    expect(received['4'].inputs.image).toBe(uploads[1]);

    // What ComfyUI made of them: the picture inverted, and the mask (1 − alpha) white where the client made it transparent.
    const inverted = await sharp(await artifact(job, 0)).removeAlpha().raw().toBuffer();
    expect([...inverted.subarray(0, 3)]).toEqual([55, 215, 165]);
    const maskSeen = await sharp(await artifact(job, 1)).removeAlpha().raw().toBuffer();
    expect([maskSeen[0], maskSeen[(8 * 24 + 20) * 3]]).toEqual([255, 0]);
  }, 60_000);

  it('a model whose workflow names no node for pictures is refused one at submit, clearly (400)', async () => {
    const picture = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#fff' } }).png().toBuffer();
    await call('PUT', '/v1/blobs', new Uint8Array(picture), { 'content-type': 'application/octet-stream' });
    const refused = await call('POST', '/v1/jobs', { type: 'image', model: 'comfy', input: { prompt: 'x', image: digestOf(picture) } });
    expect(refused.status).toBe(400);
    expect(refused.json.error.code).toBe('INVALID_INPUT');
    expect(refused.json.error.message).toMatch(/image: this comfyui model names no node that takes it \(settings\.inputs\.image\)/);
  });
});

describe('2. memory', () => {
  it('on the CPU: a fronted server is booked at its declared figure, a started one at its own process tree — never the machine\'s vram_total − vram_free', async () => {
    const stats = await (await fetch(`${comfy.url}/system_stats`)).json() as { devices: { vram_total: number; vram_free: number }[] };
    const machineUsedMB = (stats.devices[0]!.vram_total - stats.devices[0]!.vram_free) / 2 ** 20;
    expect(stats.devices[0]!.vram_total).toBe(totalmem()); // the trap is there, as on a real CPU ComfyUI
    expect((await run('comfy', { prompt: 'a fronted one', steps: 2 })).job.status).toBe('succeeded');
    expect((await run('comfy-managed', { prompt: 'a started one', steps: 2 })).job.status).toBe('succeeded');
    const status = (await call('GET', '/v1/status')).json as { hosts: { resident: { model: string; memoryMB: number }[] }[] };
    const booked = (model: string) => status.hosts[0]!.resident.find((entry) => entry.model === model)?.memoryMB;
    expect(booked('comfy')).toBe(64);
    const [server] = childrenOf(mesh.process.pid!, 'comfyui-standin');
    const tree = groupRssMB(server!.pid)!;
    expect(booked('comfy-managed')).toBeGreaterThan(16);
    expect(booked('comfy-managed')).toBeLessThanOrEqual(tree * 1.5);
    expect(booked('comfy-managed')).toBeLessThan(machineUsedMB);
  }, 90_000);
});

describe('3. previews', () => {
  it('binary preview frames become the job\'s preview events, at most as many as asked, PNG, the canvas on its way', async () => {
    const { job, events } = await run('comfy', { prompt: 'a preview', steps: 24, previews: 3 });
    expect(job.status).toBe('succeeded');
    const previews = events.filter((event): event is Extract<JobEvent, { type: 'preview' }> => event.type === 'preview');
    expect(previews.length).toBeGreaterThan(0);
    expect(previews.length).toBeLessThanOrEqual(3);
    const frames = (await comfy.state<{ previews: string[] }>()).previews.map((frame) => Buffer.from(frame, 'base64'));
    // Each frame as ComfyUI lays it out: PREVIEW_IMAGE (1), JPEG (1), then the picture.
    for (const frame of frames) expect([frame.readUInt32BE(0), frame.readUInt32BE(4), frame[8], frame[9]]).toEqual([1, 1, 0xff, 0xd8]);
    for (const preview of previews) {
      expect(preview.mediaType).toBe('image/png');
      expect(await sharp(Buffer.from(preview.b64, 'base64')).metadata()).toMatchObject({ format: 'png', width: 32, height: 32 });
    }
    const steps = previews.map((preview) => preview.step);
    expect(steps).toEqual([...steps].sort((a, b) => a - b));
  }, 60_000);

  it('reach OpenAI\'s partial_images', async () => {
    const openai = new OpenAI({ apiKey: mesh.admin, baseURL: `${mesh.url}/openai/v1`, maxRetries: 0 });
    const stream = await openai.images.generate({ model: 'comfy', prompt: 'a streamed one', size: '64x64', stream: true, partial_images: 2 });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types.at(-1)).toBe('image_generation.completed');
    expect(types.filter((type) => type === 'image_generation.partial_image').length).toBeGreaterThan(0);
  }, 60_000);
});

describe('4. restarts', () => {
  it('jobs sent while the server restarts (6 s away) wait as NOT_READY and succeed on it, one attempt each; a job it lost mid-run is sent again; the breaker counts nothing', async () => {
    expect((await run('comfy', { prompt: 'warm', steps: 2 })).job.status).toBe('succeeded');
    await comfy.knobs({ stepMs: 40 });
    const midRun = run('comfy', { prompt: 'running when it went', steps: 32 });
    await waitFor(async () => (await comfy.state<{ running: string | null }>()).running !== null, { what: 'the long job to be running' });
    await comfy.knobs({ restart: { downMs: 6000 } });
    const during = await Promise.all([run('comfy', { prompt: 'during 1', steps: 2 }), run('comfy', { prompt: 'during 2', steps: 2 }), midRun]);
    for (const { job } of during) {
      expect(job.status, JSON.stringify(job.attempts)).toBe('succeeded');
      expect(job.attempts).toHaveLength(1);
    }
    expect((await comfy.state<{ restarts: number }>()).restarts).toBe(1);
    await comfy.knobs({ stepMs: 15 });
    const status = (await call('GET', '/v1/status')).json as { hosts: { replicas: { model: string; breaker: { state: string; consecutiveFailures: number } }[] }[] };
    expect(status.hosts[0]!.replicas.find((replica) => replica.model === 'comfy')!.breaker).toMatchObject({ state: 'closed', consecutiveFailures: 0 });
    expect(readFileSync(join(data, 'logs', 'agent.log'), 'utf8')).toContain('lost the prompt in a restart; sending it again');
  }, 90_000);
});

describe('5. progress', () => {
  it('one bar over a workflow of two samplers (4 then 7 steps): never backwards, 11 steps in all', async () => {
    const { job, events } = await run('comfy-refiner', { prompt: 'refined', steps: 4 });
    expect(job.status).toBe('succeeded');
    const progress = events.filter((event): event is Extract<JobEvent, { type: 'progress' }> => event.type === 'progress');
    expect(progress.length).toBeGreaterThan(2);
    for (const event of progress) expect(event.total).toBe(11);
    for (let i = 1; i < progress.length; i++) expect(progress[i]!.step).toBeGreaterThanOrEqual(progress[i - 1]!.step);
  }, 60_000);
});

describe('6. errors', () => {
  it('an exception while running is one line — node, type, exception — without the server\'s paths; the traceback is in the agent\'s log', async () => {
    const { job } = await run('comfy-outside', { prompt: 'nowhere', steps: 1 });
    expect(job.status).toBe('failed');
    const message: string = job.error.message;
    expect(message).toMatch(/node 9 \(SaveImage\) failed: Exception: ERROR: Saving image outside the output folder is not allowed\.$/);
    expect(message).not.toContain('\n');
    expect(message).not.toContain(tempDirOf(comfy));
    const log = readFileSync(join(data, 'logs', 'agent.log'), 'utf8');
    expect(log).toContain('a ComfyUI prompt failed');
    expect(log).toMatch(/full_output_folder: \/.*outside/);
    expect(log).toContain('in save_images');
  }, 60_000);
});

/** The stand-in's own folder, as it printed it: a path the client must never see. */
function tempDirOf(standIn: StandIn): string {
  return /outputs under (\S+)/.exec(standIn.output())![1]!;
}
