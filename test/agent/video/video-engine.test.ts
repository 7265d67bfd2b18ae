import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import sharp from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../src/agent/devices.js';
import type { JobOutput, OutputOnDisk } from '../../../src/agent/core/engine.js';
import { OnnxEngine } from '../../../src/agent/engines/onnx/engine.js';
import { Governor } from '../../../src/agent/governance/governor.js';
import { Supervisor } from '../../../src/agent/governance/supervisor.js';
import { VideoEncoder } from '../../../src/agent/video/encoder.js';
import { findFfmpeg } from '../../../src/agent/video/ffmpeg.js';
import { builtinModel } from '../../../src/builtin-models/index.js';
import type { ModelManifest } from '../../../src/protocol/index.js';
import { ffprobe } from '../../helpers/ffprobe.js';
import { tempDir } from '../../helpers/mesh.js';
import { capturingLog, cgroupFile, expectNothingLeft, needsCgroups } from '../governance/helpers.js';
import { identityTag, ownIdentity } from '../../../src/agent/governance/process-identity.js';

const BROKEN_FFMPEG = new URL('../../fixtures/commands/broken-ffmpeg.sh', import.meta.url).pathname;

const log = pino({ level: 'silent' });
const dir = tempDir();
const governor = Governor.withoutCgroups(log);
const supervisor = new Supervisor(log, governor);
afterAll(() => supervisor.stopAll());

function manifest(name: 'gen' | 'gen-video'): { manifest: ModelManifest; path: string } {
  const model = builtinModel(name)!;
  const path = join(dir, `${name}.onnx`);
  writeFileSync(path, model.bytes);
  return {
    path,
    manifest: {
      name, version: model.version, engine: 'onnx', digest: model.digest, bytes: model.bytes.length, memoryMB: model.memoryMB,
      jobTypes: model.jobTypes, params: { defaultSteps: 6 }, settings: { pipeline: name === 'gen' ? 'cppn-image' : 'cppn-video' },
    },
  };
}

const systemFfmpeg = await findFfmpeg();
// Found before any FIXTURE_MODE is set: a stand-in that hangs would hang its version check too.
const brokenFfmpeg = await findFfmpeg({ ...process.env, GPUMESH_FFMPEG: BROKEN_FFMPEG });
const encoder = (ffmpeg: Awaited<ReturnType<typeof findFfmpeg>> = systemFfmpeg) => new VideoEncoder({ governor, ffmpeg, scratchDir: join(dir, 'video'), log });
const ok = (output: JobOutput | undefined) => {
  if (!output?.ok) throw new Error(`job failed: ${JSON.stringify(output)}`);
  return output;
};

describe('video jobs on the onnx engine (real worker, real ffmpeg)', () => {
  it('renders the frames, pipes them to ffmpeg and leaves an H.264 MP4 (yuv420p) and a poster that is frame 0: gen\'s image of the prompt and seed', async () => {
    const engine = new OnnxEngine(supervisor, encoder());
    const video = manifest('gen-video');
    const loaded = await engine.load(video.manifest, video.path, cpuDevice(1024));
    const progress: number[] = [];
    let ffmpegSeen = 0;
    const input = { prompt: 'a lighthouse at dusk', seed: 7, frames: 12, fps: 6, width: 64, height: 48, steps: 4 };
    const { outputs } = await loaded.run([{ id: 'clip1', input }], (p) => {
      progress.push(p.step);
      expect(p.total).toBe(12);
      // The worker plus ffmpeg, both governed: ffmpeg runs beside the worker while frames arrive.
      ffmpegSeen = Math.max(ffmpegSeen, governor.processes);
    });
    const output = ok(outputs[0]);
    expect(progress).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(ffmpegSeen).toBe(2);
    const [mp4, poster] = output.onDisk as OutputOnDisk[];
    expect(mp4).toMatchObject({ mediaType: 'video/mp4', width: 64, height: 48 });
    expect(ffprobe(mp4!.path)).toMatchObject({ codec: 'h264', pixFmt: 'yuv420p', width: 64, height: 48, frames: 12 });
    expect(ffprobe(mp4!.path).durationS).toBeCloseTo(2, 1);
    expect(output.result).toMatchObject({ frames: 12, fps: 6, durationS: 2, timings: { generateMs: expect.any(Number), encodeMs: expect.any(Number) } });

    const image = manifest('gen');
    const imageModel = await new OnnxEngine(supervisor).load(image.manifest, image.path, cpuDevice(1024));
    const picture = ok((await imageModel.run([{ id: 'img', input: { prompt: input.prompt, seed: input.seed, width: 64, height: 48, steps: 4 } }], () => {})).outputs[0]);
    const raw = async (png: Uint8Array) => sharp(png).removeAlpha().raw().toBuffer();
    expect((await raw(readFileSync(poster!.path))).equals(await raw(picture.files[0]!.bytes))).toBe(true);
    await imageModel.unload();

    // Same prompt and seed, same clip (x264 is deterministic with the same settings and threads).
    const again = ok((await loaded.run([{ id: 'clip2', input }], () => {})).outputs[0]);
    expect(again.onDisk![0]!.digest).toBe(mp4!.digest);
    for (const file of [...output.onDisk!, ...again.onDisk!]) await file.discard();
    expect(() => readFileSync(mp4!.path)).toThrow(/ENOENT/);
    expect(readdirSync(join(dir, 'video'))).toEqual([]);
    await loaded.unload();
  }, 60_000);

  it('a host without ffmpeg fails a clip with an error that says so, and runs nothing', async () => {
    const missing = await findFfmpeg({ GPUMESH_FFMPEG: 'none' });
    expect(missing).toMatchObject({ missing: expect.stringContaining('ffmpeg turned off on this host (GPUMESH_FFMPEG=none)') });
    const engine = new OnnxEngine(supervisor, encoder(missing));
    const video = manifest('gen-video');
    const loaded = await engine.load(video.manifest, video.path, cpuDevice(1024));
    await expect(loaded.run([{ id: 'c', input: { prompt: 'x', seed: 1, frames: 2, fps: 1, width: 16, height: 16, steps: 1 } }], () => {}))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', message: expect.stringMatching(/video jobs need ffmpeg, which this host does not have: ffmpeg turned off.*npm install/) });
    await loaded.unload();
  }, 30_000);

  it('a cancelled clip stops rendering, and its ffmpeg and files are gone', async () => {
    const engine = new OnnxEngine(supervisor, encoder());
    const video = manifest('gen-video');
    const loaded = await engine.load(video.manifest, video.path, cpuDevice(1024));
    const run = loaded.run([{ id: 'long', input: { prompt: 'x', seed: 1, frames: 200, fps: 24, width: 128, height: 128, steps: 6 } }], (p) => {
      if (p.step === 3) loaded.cancel(['long']);
    });
    const { outputs } = await run;
    expect(outputs[0]).toMatchObject({ ok: false, code: 'CANCELLED' });
    expect(governor.processes).toBe(1); // the worker alone
    expect(readdirSync(join(dir, 'video'))).toEqual([]);
    await loaded.unload();
  }, 60_000);

  it('an ffmpeg that breaks mid-clip fails the clip with its exit and its last stderr line (a real stand-in process)', async () => {
    const engine = new OnnxEngine(supervisor, encoder(brokenFfmpeg));
    const video = manifest('gen-video');
    const loaded = await engine.load(video.manifest, video.path, cpuDevice(1024));
    const { outputs } = await loaded.run([{ id: 'broken', input: { prompt: 'x', seed: 1, frames: 40, fps: 8, width: 64, height: 64, steps: 1 } }], () => {});
    expect(outputs[0]).toMatchObject({
      ok: false, code: 'ENGINE_FAILED', retryable: true,
      message: expect.stringMatching(/ffmpeg could not encode the clip: ffmpeg \(pid \d+\) exited with code 1; last output: Unknown encoder 'libx264'/),
    });
    expect(governor.processes).toBe(1);
    expect(readdirSync(join(dir, 'video'))).toEqual([]);
    await loaded.unload();
  }, 30_000);

  it('an ffmpeg that exits 0 without a clip is an error, not an empty video', async () => {
    process.env.FIXTURE_MODE = 'silent-success';
    try {
      const engine = new OnnxEngine(supervisor, encoder(brokenFfmpeg));
      const video = manifest('gen-video');
      const loaded = await engine.load(video.manifest, video.path, cpuDevice(1024));
      const { outputs } = await loaded.run([{ id: 'empty', input: { prompt: 'x', seed: 1, frames: 40, fps: 8, width: 64, height: 64, steps: 1 } }], () => {});
      expect(outputs[0]).toMatchObject({ ok: false, code: 'ENGINE_FAILED' });
      await loaded.unload();
    } finally {
      delete process.env.FIXTURE_MODE;
    }
  }, 30_000);
});

describe('a wedged ffmpeg', () => {
  it('a clip cancelled while ffmpeg will not finish ends CANCELLED at once, its ffmpeg stopped, its files gone', async () => {
    process.env.FIXTURE_MODE = 'hang';
    try {
      const engine = new OnnxEngine(supervisor, encoder(brokenFfmpeg));
      const video = manifest('gen-video');
      const loaded = await engine.load(video.manifest, video.path, cpuDevice(1024));
      const started = performance.now();
      const { outputs } = await loaded.run([{ id: 'wedged', input: { prompt: 'x', seed: 1, frames: 6, fps: 6, width: 32, height: 32, steps: 1 } }], (p) => {
        // Every frame is in; the stand-in now sits on them for ever, as the orchestrator's attempt timeout would find.
        if (p.step === p.total) setTimeout(() => loaded.cancel(['wedged']), 300);
      });
      expect(outputs[0]).toMatchObject({ ok: false, code: 'CANCELLED' });
      expect(performance.now() - started).toBeLessThan(10_000);
      expect(governor.processes).toBe(1);
      expect(readdirSync(join(dir, 'video'))).toEqual([]);
      await loaded.unload();
    } finally {
      delete process.env.FIXTURE_MODE;
    }
  }, 30_000);
});

describe('ffmpeg is a governed engine process', async () => {
  const captured = capturingLog();
  const governed = await Governor.create({ agentId: 'video-test', log: captured.log, config: { engines: { ffmpeg: { memoryLimitMB: 768, pidsLimit: 64, cpuWeight: 50 } } } });
  const skip = governed.cgroupVersion === null ? `skipped: no usable cgroups here (${governed.cgroupsUnavailable})` : null;
  afterAll(() => governed.close());

  it(needsCgroups('in a process group of its own and, where the host has cgroups, a cgroup of its own with the host\'s ffmpeg ceilings; nothing left after', skip), async () => {
    const own = new Supervisor(log, governed);
    const engine = new OnnxEngine(own, new VideoEncoder({ governor: governed, ffmpeg: systemFfmpeg, scratchDir: join(dir, 'governed'), limits: governed.config.engines.ffmpeg, log: captured.log }));
    const video = manifest('gen-video');
    const loaded = await engine.load(video.manifest, video.path, cpuDevice(1024));
    let seen: { pid: number; pgid: number; memory: string | null; pids: string | null } | null = null;
    const { outputs } = await loaded.run([{ id: 'gov', input: { prompt: 'x', seed: 1, frames: 16, fps: 8, width: 64, height: 64, steps: 2 } }], () => {
      if (seen) return;
      const started = captured.lines.find((line) => line.msg === 'ffmpeg started') as { pid: number; cgroups: string[] } | undefined;
      if (!started) return;
      const stat = readFileSync(`/proc/${started.pid}/stat`, 'utf8');
      const pgid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
      // Read while it runs: the limits are where the kernel reads them.
      const read = (file: string): string | null => (started.cgroups.length ? cgroupFile(started.cgroups, file) : null);
      seen = { pid: started.pid, pgid, memory: read(governed.cgroupVersion === 2 ? 'memory.max' : 'memory.limit_in_bytes'), pids: read('pids.max') };
    });
    expect(outputs[0]?.ok).toBe(true);
    for (const file of (outputs[0] as { onDisk: OutputOnDisk[] }).onDisk) await file.discard();
    expect(seen).not.toBeNull();
    expect(seen!.pgid).toBe(seen!.pid);
    const started = captured.lines.find((line) => line.msg === 'ffmpeg started') as unknown as { pid: number; cgroups: string[] };
    await expectNothingLeft(started.pid, started.cgroups);
    if (!skip) expect({ memory: seen!.memory, pids: seen!.pids }).toEqual({ memory: String(768 * 1024 * 1024), pids: '64' });
    await loaded.unload();
    await own.stopAll();
  }, 30_000);
});

describe('the scratch folder', () => {
  it('an agent at start removes the clips of agents that died mid-clip, and leaves live ones alone', async () => {
    const { mkdirSync, writeFileSync: write, readdirSync: list } = await import('node:fs');
    const scratch = join(dir, 'sweep');
    // A pid no process can have (above the largest pid_max Linux allows, 2^22), and this process's own, named for good.
    const own = identityTag(ownIdentity());
    const dead = join(scratch, 'j_dead.4194999.1x.0');
    const live = join(scratch, `j_live.${own}.0`);
    for (const folder of [dead, live]) {
      mkdirSync(folder, { recursive: true });
      write(join(folder, 'clip.mp4'), 'partial');
    }
    const sweeper = new VideoEncoder({ governor, ffmpeg: systemFfmpeg, scratchDir: scratch, log });
    expect(await sweeper.sweep()).toBe(1);
    expect(list(scratch)).toEqual([`j_live.${own}.0`]);
  });
});
