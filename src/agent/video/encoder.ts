import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readdir, rm, rmdir, stat } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import type { Logger } from 'pino';
import { EngineError, type OutputOnDisk } from '../core/engine.js';
import { classifyExit, describeExit, exitError, type ProcessEnd } from '../governance/exit-reason.js';
import type { GovernedProcess } from '../governance/governed-process.js';
import type { Governor } from '../governance/governor.js';
import { LogTail } from '../governance/log-tail.js';
import { ProcessLimits, type EngineLimits } from '../../protocol/engines/process-settings.js';
import { FFMPEG_HINT, ffmpegArgs, type ClipShape } from './ffmpeg.js';
import { identityTag, ownIdentity, tagStillRuns } from '../governance/process-identity.js';
import { moment } from '../../protocol/clock.js';

export interface VideoEncoderOptions {
  governor: Governor;
  /** ffmpeg's path, or why there is none on this host (the error every clip then gets). */
  ffmpeg: { path: string } | { missing: string };
  /** Where clips are written while they are encoded and delivered; one folder per clip, removed after. */
  scratchDir: string;
  /** The host's ceilings for ffmpeg (`--engine-limit ffmpeg.memoryLimitMB=…`). */
  limits?: EngineLimits;
  log: Logger;
}

/** A clip ffmpeg finished: the MP4 and its poster on disk, and how long ffmpeg ran. */
export interface EncodedClip {
  video: OutputOnDisk;
  poster: OutputOnDisk;
  /** From ffmpeg's start to its exit. */
  encodeMs: number;
  /** From the last frame handed to ffmpeg to its exit: what encoding added after generation ended. */
  finishMs: number;
}

/** One clip being encoded: frames go in, in order; `finish` closes ffmpeg's input and waits for the files. */
export interface ClipEncoding {
  /** Resolves once ffmpeg's pipe took the frame (backpressure: a slow encoder slows the caller, frames never pile up). */
  write(rgb: Uint8Array): Promise<void>;
  finish(): Promise<EncodedClip>;
  /** Stop ffmpeg and remove what it wrote (a cancelled or failed job). */
  abort(): Promise<void>;
}

/**
 * What makes clips of frames: the engines that render frames depend on this, not on ffmpeg (the agent gives them
 * the VideoEncoder; a benchmark gives a sink that measures generation alone).
 */
export interface ClipEncoder {
  /** Why clips cannot be encoded here (no ffmpeg), or null when they can. */
  readonly unavailable: string | null;
  open(clipId: string, shape: ClipShape): Promise<ClipEncoding>;
}

const POSTER = 'poster.png';
const VIDEO = 'clip.mp4';


/** SHA-256 of a file, streamed: a clip is never read into memory whole. */
async function digestOf(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest('hex')}`;
}

/**
 * Encodes clips with ffmpeg, each run as a governed engine process: its own
 * process group and, where the host has them, its own cgroup (limits: the
 * host's ceilings for `ffmpeg`, else governance's defaults), stopped with its
 * whole group on cancel. Frames are piped to its stdin as raw RGB; it writes
 * the MP4 and the poster into a folder of the agent's scratch space, which the
 * agent streams to the orchestrator and then removes.
 */
export class VideoEncoder implements ClipEncoder {
  readonly #options: VideoEncoderOptions;
  readonly #limits: ProcessLimits;
  #clips = 0;
  /** This agent, named for good (its pid and when it started): whose a clip's folder is. */
  readonly #owner = identityTag(ownIdentity());

  constructor(options: VideoEncoderOptions) {
    this.#options = options;
    this.#limits = ProcessLimits.parse({ ...options.limits });
  }

  /** Why clips cannot be encoded here (no ffmpeg), or null when they can. */
  get unavailable(): string | null {
    return 'missing' in this.#options.ffmpeg ? this.#options.ffmpeg.missing : null;
  }

  /**
   * Remove the folders of clips an agent that died left behind (an agent killed mid-clip never delivered them).
   * A folder's name ends in `.<pid>.<start>.<n>`: the agent that made it, named for good (identityTag); only those of
   * agents no longer running go (a folder of an older agent, named by its pid alone, is kept).
   */
  async sweep(): Promise<number> {
    let entries: string[];
    try {
      entries = await readdir(this.#options.scratchDir);
    } catch {
      return 0;
    }
    let removed = 0;
    for (const entry of entries) {
      const tag = /\.(\d+\.[0-9a-z]+)\.\d+$/.exec(entry)?.[1];
      if (tag === undefined || tag === this.#owner || tagStillRuns(tag)) continue;
      await rm(join(this.#options.scratchDir, entry), { recursive: true, force: true });
      removed++;
    }
    return removed;
  }

  /** Start ffmpeg for one clip. Throws ENGINE_FAILED, naming what is missing, on a host without ffmpeg. */
  async open(clipId: string, shape: ClipShape): Promise<ClipEncoding> {
    const { ffmpeg, governor, scratchDir, log } = this.#options;
    if ('missing' in ffmpeg) {
      throw new EngineError('ENGINE_FAILED', `video jobs need ffmpeg, which this host does not have: ${ffmpeg.missing}. ${FFMPEG_HINT}`);
    }
    const dir = join(scratchDir, `${clipId.replace(/[^A-Za-z0-9_-]/g, '_')}.${this.#owner}.${this.#clips++}`);
    await mkdir(dir, { recursive: true });
    // ffmpeg writes the clip and its poster here: the folder is the engine user's.
    await governor.handOver(dir);
    const files = { video: join(dir, VIDEO), poster: join(dir, POSTER) };
    const env: NodeJS.ProcessEnv = {};
    // The agent's own variables (its grant) stay with the agent.
    for (const [key, value] of Object.entries(process.env)) if (!key.startsWith('GPUMESH_')) env[key] = value;
    const threads = Math.max(1, Math.min(4, availableParallelism() - 1));
    let governed: GovernedProcess;
    try {
      governed = governor.spawn({ name: 'ffmpeg', file: ffmpeg.path, args: ffmpegArgs(shape, files, threads), env, cwd: dir, limits: this.#limits, stdio: ['pipe', 'ignore', 'pipe'] });
    } catch (error) {
      await rm(dir, { recursive: true, force: true });
      throw error;
    }
    const started = performance.now();
    const stderr = new LogTail({ lines: 40, bytes: 16 * 1024 });
    (governed.child.stderr as Readable).on('data', (chunk: Buffer) => stderr.write('err', chunk));
    const stdin = governed.child.stdin as Writable;
    let pipeError: Error | null = null;
    // A write to an ffmpeg that died fails with EPIPE; its exit says why, and finish reports that.
    stdin.on('error', (error) => (pipeError ??= error));
    /** Why ffmpeg ended short of a clip: its exit, classified like any engine process's, with its last stderr lines. */
    const exitFailure = (end: ProcessEnd): EngineError => {
      stderr.flush();
      const reason = classifyExit(end, { name: 'ffmpeg', logTail: stderr.lines() });
      return reason.kind === 'exited' ? new EngineError('ENGINE_FAILED', `ffmpeg could not encode the clip: ${describeExit(reason)}`) : exitError(reason);
    };
    /** A write that failed: ffmpeg stopped reading (it exited, or is exiting); wait briefly for its exit, which says why. */
    const failure = async (): Promise<EngineError> => {
      const end = governed.end ?? await Promise.race([governed.ended, moment(2000)]);
      if (end) return exitFailure(end);
      await governed.stop(2000, governor.clock);
      return new EngineError('ENGINE_FAILED', `ffmpeg (pid ${governed.pid}) stopped reading its frames: ${pipeError?.message ?? 'its input closed'}`);
    };
    const remove = (): Promise<void> => rm(dir, { recursive: true, force: true });
    const onDisk = async (path: string, mediaType: string): Promise<OutputOnDisk> => ({
      path, size: (await stat(path)).size, digest: await digestOf(path), mediaType, width: shape.width, height: shape.height,
      // The folder goes with the last of its two files.
      discard: async () => {
        await rm(path, { force: true });
        await rmdir(dir).catch(() => { /* the other file is still there */ });
      },
    });
    log.debug({ clipId, pid: governed.pid, cgroups: governed.container?.paths ?? [], ...shape }, 'ffmpeg started');

    return {
      write: (rgb) => new Promise<void>((resolve, reject) => {
        // A pipe already closed (ffmpeg gone, or the clip aborted) would take the frame and never say so again.
        if (pipeError || !governed.running || stdin.destroyed || stdin.writableEnded) return void failure().then(reject);
        const expected = shape.width * shape.height * 3;
        if (rgb.byteLength !== expected) return reject(new EngineError('ENGINE_FAILED', `a frame of ${rgb.byteLength} bytes is not ${shape.width}×${shape.height} RGB (${expected} bytes)`));
        if (stdin.write(rgb)) return resolve();
        const settle = (): void => {
          stdin.off('drain', settle);
          stdin.off('close', settle);
          if (pipeError) void failure().then(reject);
          else resolve();
        };
        stdin.once('drain', settle);
        stdin.once('close', settle);
      }),
      finish: async () => {
        const lastFrame = performance.now();
        stdin.end();
        const end = await governed.ended;
        const finished = performance.now();
        if (end.code !== 0 || end.signal !== null || end.oom.kills > 0) {
          await remove();
          throw exitFailure(end);
        }
        try {
          return {
            video: await onDisk(files.video, 'video/mp4'), poster: await onDisk(files.poster, 'image/png'),
            encodeMs: finished - started, finishMs: finished - lastFrame,
          };
        } catch (error) {
          await remove();
          throw new EngineError('ENGINE_FAILED', `ffmpeg exited 0 but its output is missing: ${(error as Error).message}`);
        }
      },
      abort: async () => {
        stdin.destroy();
        await governed.stop(2000, governor.clock);
        await remove();
      },
    };
  }
}
