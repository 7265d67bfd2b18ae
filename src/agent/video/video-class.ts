import type { ToolReport, UnavailableClass } from '../../protocol/index.js';
import { VideoEncoder, type VideoEncoderOptions } from './encoder.js';
import { FFMPEG_HINT } from './ffmpeg.js';
import type { FoundTool, MissingTool } from './find-tool.js';

/** What a host serves of video: its encoder, the classes it announces, those it cannot serve and why, its tools. */
export interface VideoClass {
  encoder: VideoEncoder;
  /** The configured classes, less `video` on a host without ffmpeg. */
  classes: string[];
  /** `video`, configured and not servable, with why: announced in the hello so the mesh can say so. */
  unavailable: UnavailableClass[];
  /** ffmpeg as found (path, source, version), for the hello; none when it is missing. */
  tools: ToolReport[];
}

/**
 * Clips are encoded by ffmpeg, a governed process like every engine's; a host without it does not serve the video
 * class, and says why. Sweeps what a previous agent left unfinished in the scratch folder.
 */
export function videoClass(options: Omit<VideoEncoderOptions, 'ffmpeg'> & { ffmpeg: FoundTool | MissingTool; classes: readonly string[] }): VideoClass {
  const { classes: configured, ...encoderOptions } = options;
  const { ffmpeg, log } = options;
  const encoder = new VideoEncoder(encoderOptions);
  if ('path' in ffmpeg) log.info({ ffmpeg: ffmpeg.path, source: ffmpeg.source, version: ffmpeg.version }, 'video: clips are encoded with ffmpeg');
  void encoder.sweep().then((removed) => {
    if (removed > 0) log.info({ removed }, 'video: removed clips a previous agent left unfinished');
  }, (error: unknown) => log.warn({ err: error }, 'video: could not sweep the scratch folder'));
  const classes = configured.filter((name) => name !== 'video' || encoder.unavailable === null);
  const unavailable = encoder.unavailable !== null && configured.includes('video') ? [{ class: 'video', reason: encoder.unavailable }] : [];
  if (unavailable.length > 0) log.warn({ classes }, `not serving the video class: ${encoder.unavailable} (${FFMPEG_HINT})`);
  return { encoder, classes, unavailable, tools: 'path' in ffmpeg ? [ffmpeg] : [] };
}
