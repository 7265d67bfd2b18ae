import { execFileSync } from 'node:child_process';

/** What ffprobe says about a video file's first video stream (a real ffprobe process; setup-test-deps installs ffmpeg). */
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
  const out = execFileSync('ffprobe', [
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
