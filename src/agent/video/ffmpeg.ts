import { checkFfmpeg, checkFfprobe, findTool, packagedBinary, type FoundTool, type MissingTool } from './find-tool.js';

/**
 * The ffmpeg this host encodes clips with (`GPUMESH_FFMPEG` names another program, or `none`), or why there is
 * none: the system's when it has libx264, else the one shipped in `@ffmpeg-installer/ffmpeg`. Looked up once at
 * agent start: an agent without ffmpeg does not serve the `video` class, and says why in its hello.
 */
export function findFfmpeg(env: NodeJS.ProcessEnv = process.env): Promise<FoundTool | MissingTool> {
  return findTool({ name: 'ffmpeg', env, packaged: () => packagedBinary('@ffmpeg-installer/ffmpeg'), check: checkFfmpeg });
}

/** What to do on a host without ffmpeg: said with every clip refused there. */
export const FFMPEG_HINT = 'reinstall gpumesh\'s dependencies (npm install brings a static ffmpeg where the platform has one), install ffmpeg with libx264 (Debian: apt-get install ffmpeg), or set GPUMESH_FFMPEG to one';

/** ffprobe the same way (`GPUMESH_FFPROBE`, the system's, else `@ffprobe-installer/ffprobe`). */
export function findFfprobe(env: NodeJS.ProcessEnv = process.env): Promise<FoundTool | MissingTool> {
  return findTool({ name: 'ffprobe', env, packaged: () => packagedBinary('@ffprobe-installer/ffprobe'), check: checkFfprobe });
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
