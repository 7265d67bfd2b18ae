import { execFileSync } from 'node:child_process';
import { findFfprobe } from '../../src/agent/video/ffmpeg.js';

/** The system's ffprobe, else the one in @ffprobe-installer/ffprobe: the tests run after `npm install` alone. */
const found = await findFfprobe();
if ('missing' in found) throw new Error(found.missing);
const FFPROBE = found.path;

/** What ffprobe says about a video file's first video stream (a real ffprobe process). */
export interface ProbedVideo {
  codec: string;
  pixFmt: string;
  width: number;
  height: number;
  /** Frames counted by decoding the stream (-count_frames), not read from the header. */
  frames: number;
  durationS: number;
  formatName: string;
}

export function ffprobe(path: string): ProbedVideo {
  const out = execFileSync(FFPROBE, [
    '-v', 'error', '-select_streams', 'v:0', '-count_frames',
    '-show_entries', 'stream=codec_name,pix_fmt,width,height,nb_read_frames:format=duration,format_name', '-of', 'json', path,
  ], { encoding: 'utf8' });
  const parsed = JSON.parse(out) as { streams: Array<Record<string, string | number>>; format: Record<string, string> };
  const stream = parsed.streams[0]!;
  return {
    codec: String(stream.codec_name), pixFmt: String(stream.pix_fmt), width: Number(stream.width), height: Number(stream.height),
    frames: Number(stream.nb_read_frames), durationS: Number(parsed.format.duration), formatName: String(parsed.format.format_name),
  };
}
