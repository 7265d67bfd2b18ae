import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobEvent } from '../../src/protocol/api/index.js';
import { execFileSync } from 'node:child_process';
import { findFfmpeg } from '../../src/agent/video/ffmpeg.js';
import type { JobView, PipelineAccepted, PipelineView } from '../../src/protocol/api/index.js';
import { ApiError } from '../../src/cli/common/client.js';
import { ffprobe } from '../helpers/ffprobe.js';
import { removeDir, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { sdcppStandinSettings } from '../helpers/standins.js';
import { childrenOf } from '../helpers/procfs.js';

/**
 * Any image engine makes clips: a model of the sd.cpp engine declared in mesh.yaml with job type `video`, its
 * frames made one image at a time by the engine's server (the sd-server stand-in, test/fixtures/standins/, which
 * speaks sd-server's API; the real one needs a GPU) and encoded by a real ffmpeg. Real processes throughout:
 * `gpumesh up` (orchestrator, agent), the stand-in the agent starts from the model's command template, ffmpeg.
 *
 * A command (the exec engine) takes a clip's starting picture as a file (`${IMAGE}`): an ffmpeg command that makes the
 * clip from the picture, or a command run per frame; a model given no picture refuses a clip that starts from one.
 */
const found = await findFfmpeg();
if ('missing' in found) throw new Error(found.missing);
const FFMPEG = found.path;
/** A frame command: the picture it is given, as the frame. */
const COPY = "require('node:fs').copyFileSync(process.argv[1], process.argv[2] + '/frame.png')";

let mesh: RunningMesh;
const data = tempDir();
const out = tempDir('gpumesh-video-images-');

beforeAll(async () => {
  writeFileSync(join(data, 'sd-standin.gguf'), 'stand-in weights: any bytes the server can be pointed at');
  mesh = await startMesh({
    data,
    config: {
      models: {
        // A command that makes a whole clip from the clip's starting picture: ffmpeg, looping it.
        'still-clip': {
          engine: 'exec', types: ['video'], memoryMB: 64,
          settings: {
            command: [FFMPEG, '-v', 'error', '-loop', '1', '-i', '${IMAGE}', '-frames:v', '4', '-r', '4', '-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-y', '${OUTPUT_DIR}/clip.mp4'],
            clips: true, pictures: ['image'],
          },
        },
        // A command run once per frame, given the clip's starting picture each time: it keeps the picture as it is.
        'copy-frames': {
          engine: 'exec', types: ['video'], memoryMB: 64,
          settings: { command: [process.execPath, '-e', COPY, '${IMAGE}', '${OUTPUT_DIR}'], pictures: ['image'] },
        },
        // A clip command given no picture: a clip that starts from one is refused at submit, not made without it.
        'blank-clip': {
          engine: 'exec', types: ['video'], memoryMB: 64,
          settings: { command: [FFMPEG, '-v', 'error', '-f', 'lavfi', '-i', 'color=c=black:s=64x64:r=4', '-frames:v', '4', '-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-y', '${OUTPUT_DIR}/clip.mp4'], clips: true },
        },
        'sd-clip': {
          engine: 'sdcpp', types: ['video'], memoryMB: 64, file: 'sd-standin.gguf',
          settings: sdcppStandinSettings("--step-ms 5 --fail-prompt 'no such scene'"),
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

  /** A pipeline picture → clip through `model`, to its end. */
  async function pictureToClip(model: string): Promise<{ picture: JobView; clip: JobView }> {
    const client = mesh.client();
    const accepted = await client.request<PipelineAccepted>('POST', '/v1/pipelines', {
      steps: [
        { id: 'picture', type: 'image', input: { prompt: 'a lighthouse at dusk', seed: 21, width: 64, height: 64, steps: 4 } },
        { id: 'clip', type: 'video', model, input: { prompt: 'the lighthouse, still', frames: 4, fps: 4, width: 64, height: 64, image: { fromStep: 'picture' } } },
      ],
    });
    const done = await waitFor(async () => {
      const view = await client.request<PipelineView>('GET', `/v1/pipelines/${accepted.id}`);
      return view.status === 'running' ? null : view;
    }, { timeoutMs: 60_000, what: 'the pipeline to end' });
    const [picture, clip] = done.steps.map((step) => step.job) as [JobView, JobView];
    expect(clip.status, JSON.stringify(clip.error)).toBe('succeeded');
    return { picture, clip };
  }

  const download = async (url: string): Promise<Buffer> => Buffer.from(await (await fetch(`${mesh.url}${url}`, { headers: { authorization: `Bearer ${mesh.admin}` } })).arrayBuffer());
  /** The first frame of a clip, decoded by ffmpeg, as 64×64 RGB. */
  const firstFrame = (file: string): Buffer => execFileSync(FFMPEG, ['-v', 'error', '-i', file, '-frames:v', '1', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', '64x64', '-'], { maxBuffer: 1 << 20 });
  const rgb = (png: Buffer): Promise<Buffer> => sharp(png).removeAlpha().resize(64, 64).raw().toBuffer();
  const meanDifference = (a: Uint8Array, b: Uint8Array): number => {
    let sum = 0;
    for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
    return sum / a.length;
  };

  it('a command makes the clip from its starting picture (${IMAGE}): ffmpeg loops the picture made by the step before, its first frame the picture', async () => {
    const { picture, clip } = await pictureToClip('still-clip');
    // The picture moved by digest into the clip's input, and reached the command as a file.
    expect(clip.input.image).toBe(picture.artifacts[0]!.digest);
    const [video] = clip.artifacts;
    expect(video).toMatchObject({ mediaType: 'video/mp4' });
    const file = join(out, 'still.mp4');
    writeFileSync(file, await download(video!.url));
    expect(ffprobe(file)).toMatchObject({ codec: 'h264', width: 64, height: 64, frames: 4 });
    const source = await rgb(await download(picture.artifacts[0]!.url));
    // Frame 0 is the picture, give or take H.264's loss; a black frame of the same size is far from it.
    const difference = meanDifference(firstFrame(file), source);
    expect(difference).toBeLessThan(12);
    expect(difference).toBeLessThan(meanDifference(Buffer.alloc(source.length), source) / 4);
  }, 120_000);

  it('a command run per frame is given the clip\'s starting picture for each frame', async () => {
    const { picture, clip } = await pictureToClip('copy-frames');
    const video = clip.artifacts.find((artifact) => artifact.mediaType === 'video/mp4')!;
    const file = join(out, 'copied.mp4');
    writeFileSync(file, await download(video.url));
    expect(ffprobe(file)).toMatchObject({ width: 64, height: 64, frames: 4 });
    expect(meanDifference(firstFrame(file), await rgb(await download(picture.artifacts[0]!.url)))).toBeLessThan(12);
  }, 120_000);

  it('a clip that starts from a picture is refused at submit by a model that is given none, naming what would take it', async () => {
    const client = mesh.client();
    const { id } = await client.submit({ type: 'image', input: { prompt: 'a source', seed: 3, width: 64, height: 64, steps: 2 } });
    expect((await client.follow(id)).type).toBe('succeeded');
    for (const [model, said] of [['blank-clip', /image: this exec model's command is given no image \(its settings\.pictures lists what it takes, as \$\{IMAGE\}\)/], ['sd-clip', /image: the sdcpp engine does not take pictures as inputs/]] as const) {
      const refused = await client.request('POST', '/v1/jobs', { type: 'video', model, input: { prompt: 'x', frames: 4, fps: 4, width: 64, height: 64, image: { fromJob: id, output: 0 } } }).catch((error: unknown) => error);
      expect(refused, model).toBeInstanceOf(ApiError);
      expect((refused as ApiError).status).toBe(400);
      expect((refused as ApiError).code).toBe('INVALID_INPUT');
      expect((refused as ApiError).message).toMatch(said);
    }
    // In a pipeline too, before anything of it is stored.
    const piped = await client.request('POST', '/v1/pipelines', {
      steps: [
        { id: 'picture', type: 'image', input: { prompt: 'p', width: 64, height: 64, steps: 1 } },
        { id: 'clip', type: 'video', model: 'blank-clip', input: { prompt: 'x', frames: 4, fps: 4, width: 64, height: 64, image: { fromStep: 'picture' } } },
      ],
    }).catch((error: unknown) => error);
    expect((piped as ApiError).code).toBe('PIPELINE_INVALID');
    expect((piped as ApiError).message).toContain('settings.pictures');
  }, 60_000);

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
