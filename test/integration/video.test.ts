import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { JobEvent, JobView } from '../../src/protocol/api/index.js';
import { ffprobe } from '../helpers/ffprobe.js';
import { meshForFile, removeDir, tempDir } from '../helpers/mesh.js';
import { gpumeshRun } from '../helpers/processes.js';

// A fresh `gpumesh up` (orchestrator, local agent, ONNX worker, ffmpeg: all real processes), no mesh.yaml:
// video must work out of the box.
const mesh = meshForFile();
const out = tempDir('gpumesh-video-out-');
afterAll(() => removeDir(out));

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: any; headers: Headers; bytes: Buffer }> {
  const response = await fetch(`${mesh().url}${path}`, {
    method, headers: { authorization: `Bearer ${mesh().admin}`, ...(body ? { 'content-type': 'application/json' } : {}), ...headers },
    body: body ? JSON.stringify(body) : undefined,
  });
  const bytes = Buffer.from(await response.arrayBuffer());
  const text = bytes.toString('utf8');
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // a binary body
  }
  return { status: response.status, json, headers: response.headers, bytes };
}

describe('video jobs end to end through a real mesh', () => {
  it('a clip is generated, encoded by ffmpeg, stored, and is what it says: H.264, yuv420p, every frame, the duration, the size', async () => {
    // The banner says which ffmpeg the local agent encodes with: the system's, else the one npm installed.
    expect(mesh().output()).toMatch(/ {11}video: on — ffmpeg \S+ \((system|package)\)\n/);
    const client = mesh().client();
    const accepted = await client.submit({ type: 'video', input: { prompt: 'a lighthouse at dusk', seed: 3, frames: 24, fps: 12, width: 96, height: 64, steps: 4 } });
    const events: JobEvent[] = [];
    const terminal = await client.follow(accepted.id, (event) => events.push(event));
    expect(terminal.type, JSON.stringify(terminal)).toBe('succeeded');

    // Progress per frame over SSE: steps count frames, up to all 24 of them.
    const progress = events.filter((event): event is Extract<JobEvent, { type: 'progress' }> => event.type === 'progress');
    expect(progress.length).toBeGreaterThan(1);
    expect(progress.every((event) => event.total === 24)).toBe(true);
    expect(progress.map((event) => event.step)).toEqual([...progress.map((event) => event.step)].sort((a, b) => a - b));
    expect(progress.at(-1)!.step).toBe(24);

    const job = await client.job(accepted.id);
    expect(job).toMatchObject({ type: 'video', model: 'gen-video', status: 'succeeded' });
    // Routing sends video to class video, which the local agent of `gpumesh up` serves.
    expect(job.attempts[0]!.route).toMatchObject({ class: 'video' });
    expect(job.result).toMatchObject({ frames: 24, fps: 12, width: 96, height: 64, durationS: 2, timings: { generateMs: expect.any(Number), encodeMs: expect.any(Number) } });
    const [video, poster] = job.artifacts;
    expect(video).toMatchObject({ mediaType: 'video/mp4', width: 96, height: 64, type: 'video', prompt: 'a lighthouse at dusk' });
    expect(poster).toMatchObject({ mediaType: 'image/png', width: 96, height: 64 });

    const file = join(out, 'clip.mp4');
    const whole = await call('GET', video!.url);
    expect(whole.status).toBe(200);
    expect(whole.headers.get('content-type')).toBe('video/mp4');
    expect(whole.bytes.length).toBe(video!.bytes);
    writeFileSync(file, whole.bytes);
    const probed = ffprobe(file);
    expect(probed).toMatchObject({ codec: 'h264', pixFmt: 'yuv420p', width: 96, height: 64, frames: 24 });
    expect(probed.durationS).toBeCloseTo(2, 1);
    expect(probed.formatName).toContain('mp4');

    const png = await call('GET', poster!.url);
    expect(png.headers.get('content-type')).toBe('image/png');
    expect(png.bytes.subarray(1, 4).toString()).toBe('PNG');
  }, 90_000);

  it('the blob route serves the MP4 by ranges, as a <video> asks for it: Accept-Ranges, 206 with Content-Range, 416 past the end', async () => {
    const client = mesh().client();
    const accepted = await client.submit({ type: 'video', input: { prompt: 'ranges', seed: 1, frames: 8, fps: 8, width: 64, height: 64, steps: 2 } });
    expect((await client.follow(accepted.id)).type).toBe('succeeded');
    const video = (await client.job(accepted.id)).artifacts.find((artifact) => artifact.mediaType === 'video/mp4')!;
    const head = await call('HEAD', video.url);
    expect(head.headers.get('accept-ranges')).toBe('bytes');
    const whole = await call('GET', video.url);
    const part = await call('GET', video.url, undefined, { range: 'bytes=100-1099' });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toBe(`bytes 100-1099/${video.bytes}`);
    expect(part.headers.get('content-type')).toBe('video/mp4');
    expect(part.bytes.equals(whole.bytes.subarray(100, 1100))).toBe(true);
    const tail = await call('GET', video.url, undefined, { range: 'bytes=-16' });
    expect(tail.status).toBe(206);
    expect(tail.bytes.equals(whole.bytes.subarray(-16))).toBe(true);
    const beyond = await call('GET', video.url, undefined, { range: `bytes=${video.bytes}-` });
    expect(beyond.status).toBe(416);
    expect(beyond.json.error.code).toBe('RANGE_NOT_SATISFIABLE');
  }, 60_000);

  it('gpumesh submit --frames --fps makes a clip and saves it as .mp4 beside its poster', async () => {
    const env = { GPUMESH_HOME: mesh().data, GPUMESH_URL: mesh().url };
    const result = await gpumeshRun(['submit', '--prompt', 'a paper boat', '--seed', '9', '--frames', '10', '--fps', '5', '--size', '64x48', '--steps', '2', '--wait', '--out', out], env);
    expect(result.code, result.output).toBe(0);
    // The bar follows the clip's per-frame progress, but a batch that ends within the agent's report delay
    // (REPORT_DELAY_MS, or later on a loaded machine) sends only its result: the frame count is checked there.
    expect(result.output).toMatch(/step \d+\/\d+/);
    expect(result.output).toMatch(/"frames":10,"fps":5,"width":64,"height":48/);
    const files = [...result.output.matchAll(/file\s+(\S+)/g)].map((match) => match[1]!);
    expect(files).toHaveLength(2);
    expect(files[0]).toMatch(/\.mp4$/);
    expect(files[1]).toMatch(/\.poster\.png$/);
    expect(ffprobe(files[0]!)).toMatchObject({ codec: 'h264', pixFmt: 'yuv420p', frames: 10, width: 64, height: 48 });
    expect(ffprobe(files[0]!).durationS).toBeCloseTo(2, 1);
  }, 60_000);

  it('refuses bad clips with a 400 that names the field, before anything runs', async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ prompt: 'x', frames: 1 }, /frames: Too small/],
      [{ prompt: 'x', frames: 601 }, /frames: Too big/],
      [{ prompt: 'x', frames: 2.5 }, /frames: /],
      [{ prompt: 'x', fps: 0 }, /fps: Too small/],
      [{ prompt: 'x', fps: 61 }, /fps: Too big/],
      [{ prompt: 'x', width: 65 }, /width: must be even/],
      [{ prompt: 'x', height: 2048 }, /height: Too big/],
      [{ prompt: 'x', width: 1024, height: 1024 }, /width × height: 1024×1024 is 1048576 pixels a frame; the limit is 262144/],
      [{ prompt: 'x', width: 512, height: 512, frames: 600 }, /frames: 600 frames of 512×512 are 157286400 pixels; the limit for a clip is 50000000/],
      [{ prompt: '' }, /prompt: prompt must not be empty/],
      [{ prompt: 'x', negativePrompt: 'no' }, /Unrecognized key: "negativePrompt"/],
    ];
    for (const [input, message] of cases) {
      const answer = await call('POST', '/v1/jobs', { type: 'video', input });
      expect(answer.status, JSON.stringify(input)).toBe(400);
      expect(answer.json.error.code).toBe('INVALID_INPUT');
      expect(answer.json.error.message, JSON.stringify(input)).toMatch(message);
    }
    // Defaults are filled and stored, so a clip can be made again.
    const accepted = await call('POST', '/v1/jobs', { type: 'video', input: { prompt: 'defaults', seed: 4, frames: 2, width: 16, height: 16, steps: 1 } });
    expect(accepted.status).toBe(202);
    const job = (await call('GET', `/v1/jobs/${accepted.json.id as string}`)).json as JobView;
    expect(job.input).toEqual({ prompt: 'defaults', seed: 4, frames: 2, fps: 24, width: 16, height: 16, steps: 1 });
  }, 30_000);
});
