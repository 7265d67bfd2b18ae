import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Governor } from '../../../src/agent/governance/governor.js';
import { VideoEncoder } from '../../../src/agent/video/encoder.js';
import { findFfmpeg, findFfprobe } from '../../../src/agent/video/ffmpeg.js';
import { checkFfmpeg, findTool, packagedBinary } from '../../../src/agent/video/find-tool.js';
import { ffprobe } from '../../helpers/ffprobe.js';
import { tempDir } from '../../helpers/mesh.js';

const dir = tempDir();
/** A PATH with no ffmpeg on it: a machine where only `npm install` ran. */
const BARE = { PATH: join(dir, 'empty') };

/** An `ffmpeg` on PATH built without libx264 (some distributions' builds): it answers -version and -encoders. */
function ffmpegWithoutX264(): string {
  const bin = join(dir, 'no-x264');
  const file = join(bin, 'ffmpeg');
  mkdirSync(bin, { recursive: true });
  writeFileSync(file, '#!/bin/sh\ncase "$*" in *-version*) echo "ffmpeg version 0.0-stand-in Copyright (c) nobody";; *-encoders*) echo " V..... mpeg4 MPEG-4 part 2";; esac\n');
  chmodSync(file, 0o755);
  return bin;
}

describe('finding ffmpeg and ffprobe', () => {
  it('uses the packaged ffmpeg (with libx264) when there is none on PATH, and says so', async () => {
    const found = await findFfmpeg(BARE);
    expect(found).toMatchObject({ name: 'ffmpeg', source: 'package', path: packagedBinary('@ffmpeg-installer/ffmpeg'), version: expect.stringMatching(/^ffmpeg version /) });
    expect(await checkFfmpeg((found as { path: string }).path)).toMatchObject({ unfit: null });
  });

  it('prefers the system ffmpeg when it has libx264, and passes one without it over for the packaged one', async () => {
    // A system ffmpeg that passes its check (the check is the stand-in's: this machine may have no ffmpeg at all).
    const system = await findTool({ name: 'ffmpeg', env: { PATH: ffmpegWithoutX264() }, packaged: () => null, check: async () => ({ version: 'v', unfit: null }) });
    expect(system).toMatchObject({ source: 'system', path: join(ffmpegWithoutX264(), 'ffmpeg') });
    const passedOver = await findFfmpeg({ PATH: ffmpegWithoutX264() });
    expect(passedOver).toMatchObject({ source: 'package' });
  });

  it('without either, says what it tried', async () => {
    const none = await findTool({ name: 'ffmpeg', env: { PATH: ffmpegWithoutX264() }, packaged: () => null, check: checkFfmpeg });
    expect(none).toEqual({ missing: expect.stringMatching(/^ffmpeg not found \(.*no-x264\/ffmpeg: no libx264 encoder; no ffmpeg package for /) });
    expect(await findFfmpeg({ ...process.env, GPUMESH_FFMPEG: 'none' })).toEqual({ missing: 'ffmpeg turned off on this host (GPUMESH_FFMPEG=none)' });
    expect(await findFfmpeg({ ...process.env, GPUMESH_FFMPEG: join(dir, 'nope') })).toEqual({ missing: expect.stringMatching(/^ffmpeg not found \(GPUMESH_FFMPEG=.*nope: cannot start/) });
  });

  it('finds ffprobe the same way', async () => {
    expect(await findFfprobe(BARE)).toMatchObject({ name: 'ffprobe', source: 'package', version: expect.stringMatching(/^ffprobe version /) });
  });

  it('the packaged ffmpeg encodes a clip the agent can deliver (video works after npm install alone)', async () => {
    const ffmpeg = await findFfmpeg(BARE);
    const log = pino({ level: 'silent' });
    const encoder = new VideoEncoder({ governor: Governor.withoutCgroups(log), ffmpeg, scratchDir: join(dir, 'video'), log });
    expect(encoder.unavailable).toBeNull();
    const clip = await encoder.open('clip', { width: 32, height: 16, fps: 4 });
    for (let frame = 0; frame < 8; frame++) await clip.write(new Uint8Array(32 * 16 * 3).fill(frame * 30));
    const { video, poster } = await clip.finish();
    expect(ffprobe(video.path)).toMatchObject({ codec: 'h264', pixFmt: 'yuv420p', width: 32, height: 16, frames: 8 });
    expect(poster.mediaType).toBe('image/png');
  }, 30_000);
});
