import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobEvent } from '../../src/protocol/api/index.js';
import { ffprobe } from '../helpers/ffprobe.js';
import { removeDir, ROOT, startMesh, tempDir, waitFor, type RunningMesh, TSX_LOADER } from '../helpers/mesh.js';
import { childrenOf } from '../helpers/procfs.js';

/**
 * Any image engine makes clips: a model of the sd.cpp engine declared in mesh.yaml with job type `video`, its
 * frames made one image at a time by the engine's server (the sd-server stand-in, test/fixtures/standins/, which
 * speaks sd-server's API; the real one needs a GPU) and encoded by a real ffmpeg. Real processes throughout:
 * `gpumesh up` (orchestrator, agent), the stand-in the agent starts from the model's command template, ffmpeg.
 */
const SDCPP = join(ROOT, 'test/fixtures/standins/sdcpp-standin.ts');

let mesh: RunningMesh;
const data = tempDir();
const out = tempDir('gpumesh-video-images-');

beforeAll(async () => {
  writeFileSync(join(data, 'sd-standin.gguf'), 'stand-in weights: any bytes the server can be pointed at');
  mesh = await startMesh({
    data,
    config: {
      models: {
        'sd-clip': {
          engine: 'sdcpp', types: ['video'], memoryMB: 64, file: 'sd-standin.gguf',
          settings: {
            command: `'${process.execPath}' --import ${TSX_LOADER} '${SDCPP}' --port \${PORT} --model \${MODEL_PATH} --step-ms 5 --fail-prompt 'no such scene'`,
            readiness: { http: '/sdcpp/v1/capabilities', timeoutMs: 60_000, intervalMs: 50 },
          },
        },
      },
    },
  });
}, 120_000);

afterAll(async () => {
  await mesh?.stop();
  removeDir(data);
  removeDir(out);
});

describe('video from an image engine (sd.cpp stand-in)', () => {
  it('makes each frame with the engine, encodes them with ffmpeg, and reports progress per frame', async () => {
    const client = mesh.client();
    const accepted = await client.submit({ type: 'video', model: 'sd-clip', input: { prompt: 'a harbour at night', seed: 11, frames: 6, fps: 6, width: 96, height: 64, steps: 2 } });
    const events: JobEvent[] = [];
    const terminal = await client.follow(accepted.id, (event) => events.push(event));
    expect(terminal.type, JSON.stringify(terminal)).toBe('succeeded');

    const progress = events.filter((event): event is Extract<JobEvent, { type: 'progress' }> => event.type === 'progress');
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.every((event) => event.total === 6)).toBe(true);
    expect(progress.at(-1)!.step).toBe(6);

    const job = await client.job(accepted.id);
    expect(job).toMatchObject({ type: 'video', model: 'sd-clip', status: 'succeeded', result: { frames: 6, fps: 6, width: 96, height: 64, durationS: 1 } });
    const [video, poster] = job.artifacts;
    expect(video).toMatchObject({ mediaType: 'video/mp4', width: 96, height: 64 });
    expect(poster).toMatchObject({ mediaType: 'image/png', width: 96, height: 64 });

    const file = join(out, 'clip.mp4');
    const response = await fetch(`${mesh.url}${video!.url}`, { headers: { authorization: `Bearer ${mesh.admin}` } });
    writeFileSync(file, Buffer.from(await response.arrayBuffer()));
    expect(ffprobe(file)).toMatchObject({ codec: 'h264', pixFmt: 'yuv420p', width: 96, height: 64, frames: 6 });

    // The poster is frame 0: the image the engine makes for the clip's prompt with its seed, at the clip's size.
    const posterBytes = Buffer.from(await (await fetch(`${mesh.url}${poster!.url}`, { headers: { authorization: `Bearer ${mesh.admin}` } })).arrayBuffer());
    expect((await sharp(posterBytes).metadata())).toMatchObject({ width: 96, height: 64, format: 'png' });
  }, 120_000);

  it('a cancel mid-clip stops the frames and the clip\'s ffmpeg: CANCELLED, nothing left running', async () => {
    const client = mesh.client();
    const accepted = await client.submit({ type: 'video', model: 'sd-clip', input: { prompt: 'a long one', seed: 2, frames: 200, fps: 24, width: 96, height: 64, steps: 4 } });
    let cancelled = false;
    const terminal = await client.follow(accepted.id, (event) => {
      if (event.type === 'progress' && !cancelled) {
        cancelled = true;
        void fetch(`${mesh.url}/v1/jobs/${accepted.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${mesh.admin}` } });
      }
    });
    expect(terminal.type).toBe('cancelled');
    // The local agent runs in `gpumesh up`'s process: its ffmpeg would be a child of that.
    await waitFor(() => childrenOf(mesh.process.pid!, 'ffmpeg').length === 0, { timeoutMs: 10_000, what: 'the clip\'s ffmpeg to end' });
    expect((await client.job(accepted.id)).artifacts).toEqual([]);
  }, 120_000);

  // Last: the refused clip is retried and its failures open the host × model breaker.
  it('a frame the engine refuses fails the clip with the engine\'s error, naming the frame', async () => {
    const client = mesh.client();
    const accepted = await client.submit({ type: 'video', model: 'sd-clip', input: { prompt: 'no such scene', seed: 1, frames: 4, fps: 4, width: 96, height: 64, steps: 1 } });
    const terminal = await client.follow(accepted.id);
    expect(terminal.type).toBe('failed');
    const job = await client.job(accepted.id);
    expect(job.error?.message).toMatch(/frame 1 of 4: /);
    expect(job.artifacts).toEqual([]);
  }, 120_000);
});
