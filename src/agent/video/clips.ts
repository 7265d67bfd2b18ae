import type { ClipEncoder, ClipEncoding } from './encoder.js';
import { FFMPEG_HINT } from './ffmpeg.js';
import { EngineError, type BatchMemory, type BatchResult, type EngineJob, type JobOutput, type Progress } from '../core/engine.js';

/** Takes one frame of a job's clip, in order; resolves when the frame is in its encoder's pipe. */
export type FrameSink = (jobId: string, index: number, rgb: Uint8Array) => Promise<void>;

export interface ClipBatch {
  jobs: readonly EngineJob[];
  encoder: ClipEncoder | null;
  onProgress(progress: Progress): void;
  /** Stop rendering these jobs' frames (their encoder failed). */
  cancel(jobIds: readonly string[]): void;
  /**
   * Register what to do when jobs of the batch are cancelled (the orchestrator's cancel, a deadline, an attempt
   * timeout): their encoders are stopped too, wherever the clip is — rendering, or waiting for ffmpeg to finish.
   */
  onCancel(listener: (jobIds: readonly string[]) => void): void;
  /** Render every job's frames into the sink; the worker's outputs carry each job's generation time. */
  render(onFrame: FrameSink): Promise<{ outputs: JobOutput[]; memory: BatchMemory }>;
}

interface Clip {
  encoding: Promise<ClipEncoding>;
  failed: EngineError | null;
  /** Frames that arrived (counted on arrival, so their order is checked) and frames in the encoder's pipe. */
  received: number;
  frames: number;
  /** Settles when every frame that arrived so far is in the pipe (or the clip failed). */
  written: Promise<void>;
}

const asEngineError = (error: unknown): EngineError =>
  error instanceof EngineError ? error : new EngineError('ENGINE_FAILED', `encoding the clip failed: ${(error as Error).message}`);

const failedOutput = (jobId: string, error: EngineError): JobOutput => ({ jobId, ok: false, code: error.code, message: error.message, retryable: error.retryable });

/**
 * A batch of clips: the worker renders frames, each job's frames go to an ffmpeg of its own (started at its first
 * frame), and each clip's MP4 and poster come back as files on disk for the agent to stream to the orchestrator.
 * A clip whose encoder fails fails alone; its frames stop being rendered.
 */
export async function encodeClips(batch: ClipBatch): Promise<BatchResult> {
  const { jobs, encoder } = batch;
  const unavailable = encoder ? encoder.unavailable : 'this agent was built without a video encoder';
  if (!encoder || unavailable) {
    throw new EngineError('ENGINE_FAILED', `video jobs need ffmpeg, which this host does not have: ${unavailable}. ${FFMPEG_HINT}`);
  }
  const clips = new Map<string, Clip>();
  const byId = new Map(jobs.map((job) => [job.id, job]));
  const cancelled = new Set<string>();
  const clipOf = (jobId: string): Clip => {
    let clip = clips.get(jobId);
    if (!clip) {
      const input = byId.get(jobId)?.input ?? {};
      const encoding = encoder.open(jobId, { width: Number(input.width), height: Number(input.height), fps: Number(input.fps) });
      clip = { encoding, failed: null, received: 0, frames: 0, written: Promise.resolve() };
      // Seen by the first write too; this only keeps a failed start from being an unhandled rejection.
      encoding.catch(() => {});
      clips.set(jobId, clip);
    }
    return clip;
  };
  const onFrame: FrameSink = (jobId, index, rgb) => {
    const clip = clipOf(jobId);
    const expected = clip.received++;
    const write = async (): Promise<void> => {
      if (clip.failed) return;
      try {
        if (index !== expected) throw new EngineError('ENGINE_FAILED', `frame ${index} of ${jobId} arrived after ${expected} frames`);
        await (await clip.encoding).write(rgb);
        clip.frames++;
      } catch (error) {
        clip.failed = asEngineError(error);
        batch.cancel([jobId]);
      }
    };
    // Frames go into the pipe one after another, in the order they arrived; the worker's result may come before
    // the last of them is written, so the clip is finished only once `written` settles.
    clip.written = clip.written.then(write);
    return clip.written;
  };
  const abort = async (clip: Clip | undefined): Promise<void> => {
    if (!clip) return;
    await clip.encoding.then((encoding) => encoding.abort(), () => {});
  };
  batch.onCancel((jobIds) => {
    for (const jobId of jobIds) {
      if (!byId.has(jobId) || cancelled.has(jobId)) continue;
      cancelled.add(jobId);
      void abort(clips.get(jobId));
    }
  });
  const cancelledOutput = (jobId: string): JobOutput => ({ jobId, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false });

  let rendered: { outputs: JobOutput[]; memory: BatchMemory };
  try {
    rendered = await batch.render(onFrame);
  } catch (error) {
    await Promise.all([...clips.values()].map(async (clip) => {
      await clip.written;
      await abort(clip);
    }));
    throw error;
  }
  const outputs = await Promise.all(jobs.map(async (job, index): Promise<JobOutput> => {
    const output = rendered.outputs[index]!;
    const clip = clips.get(job.id);
    await clip?.written;
    if (cancelled.has(job.id)) {
      await abort(clip);
      return cancelledOutput(job.id);
    }
    if (clip?.failed) {
      await abort(clip);
      return failedOutput(job.id, clip.failed);
    }
    if (!output.ok) {
      await abort(clip);
      return output;
    }
    const frames = Number(job.input.frames);
    if (!clip || clip.frames !== frames) {
      await abort(clip);
      return failedOutput(job.id, new EngineError('ENGINE_FAILED', `the worker rendered ${clip?.frames ?? 0} of the clip's ${frames} frames`));
    }
    try {
      const encoded = await (await clip.encoding).finish();
      const generateMs = Number((output.result as { generateMs?: number } | undefined)?.generateMs ?? 0);
      const fps = Number(job.input.fps);
      return {
        jobId: job.id, ok: true, files: [], onDisk: [encoded.video, encoded.poster],
        result: {
          frames, fps, width: Number(job.input.width), height: Number(job.input.height), durationS: frames / fps,
          timings: { generateMs, encodeMs: Math.round(encoded.encodeMs), finishMs: Math.round(encoded.finishMs) },
        },
      };
    } catch (error) {
      // Stopped because the job was cancelled while ffmpeg finished: that is the job's end, not a failure.
      return cancelled.has(job.id) ? cancelledOutput(job.id) : failedOutput(job.id, asEngineError(error));
    }
  }));
  return { outputs, memory: rendered.memory };
}
