import { MissingExecutable, resolveExecutable } from '../governance/executable.js';

/**
 * Where ffmpeg is on this host, found as execvp would find it (`GPUMESH_FFMPEG` names another program), or why
 * not. Looked up once at agent start: an agent without ffmpeg does not serve the `video` class.
 */
export function findFfmpeg(env: NodeJS.ProcessEnv = process.env): { path: string } | { missing: string } {
  try {
    return { path: resolveExecutable(env.GPUMESH_FFMPEG ?? 'ffmpeg', env) };
  } catch (error) {
    if (error instanceof MissingExecutable) return { missing: error.message };
    throw error;
  }
}

/** A clip's shape as ffmpeg is told it: raw RGB frames of width × height at fps. */
export interface ClipShape {
  width: number;
  height: number;
  fps: number;
}

/**
 * ffmpeg's arguments: raw rgb24 frames on stdin become an H.264 MP4 in yuv420p (the pixel format every player
 * decodes) with its index at the front (`+faststart`, so a browser can start playing and seek by range requests
 * before it has the whole file), and the first frame a lossless PNG poster. `-threads` keeps the encoder from
 * taking every core of a host that also runs the generator.
 */
export function ffmpegArgs(shape: ClipShape, files: { video: string; poster: string }, threads: number): string[] {
  return [
    '-hide_banner', '-loglevel', 'error', '-nostats',
    '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', `${shape.width}x${shape.height}`, '-framerate', String(shape.fps), '-i', 'pipe:0',
    '-map', '0:v', '-c:v', 'libx264', '-preset', 'veryfast', '-crf', '20', '-pix_fmt', 'yuv420p', '-threads', String(threads),
    '-movflags', '+faststart', '-f', 'mp4', '-y', files.video,
    '-map', '0:v', '-frames:v', '1', '-c:v', 'png', '-f', 'image2', '-update', '1', '-y', files.poster,
  ];
}
