import sharp from 'sharp';
import type { ModelManifest } from '../../protocol/index.js';
import { EngineError, type BatchMemory, type BatchResult, type Engine, type EngineJob, type JobOutput, type LoadedModel, type Progress } from '../core/engine.js';
import { encodeClips, type FrameSink } from './clips.js';
import type { ClipEncoder } from './encoder.js';

/** Whether a model serves clips: a manifest that lists the `video` job type. */
const servesVideo = (manifest: ModelManifest): boolean => manifest.jobTypes.includes('video');

/**
 * Video from an engine that makes images (sd.cpp, ComfyUI, an OpenAI-style server, a command): models of it that
 * serve `video` are wrapped (see framesFromImages); the rest are the engine's own — and so are those that make whole
 * clips themselves (`makesClips`: an exec command with `settings.clips`).
 */
export function withFramesFromImages(engine: Engine, encoder: ClipEncoder | undefined, makesClips: (manifest: ModelManifest) => boolean = () => false): Engine {
  return {
    name: engine.name,
    load: async (manifest, modelPath, device) => {
      const loaded = await engine.load(manifest, modelPath, device);
      return servesVideo(manifest) && !makesClips(manifest) ? framesFromImages(loaded, encoder) : loaded;
    },
    close: () => engine.close(),
  };
}

/**
 * A clip model made of an image model. Frame f of a clip is the image the model makes for the clip's prompt, size
 * and steps with seed + f — one request to the engine per frame, in order — decoded to RGB (sharp) and piped to
 * the clip's ffmpeg as it comes, exactly like the built-in generator's frames (clips.ts). Progress is per frame.
 * Consecutive seeds make a sequence of related but distinct images: a slideshow at `fps`, not motion; an engine
 * with a video model of its own (ComfyUI with an animation workflow) should be fed video jobs by its own workflow.
 * A clip that starts from a picture (`image`, `strength`) hands it to every frame, an image-to-image request each:
 * the orchestrator admits such a clip only for a model that takes pictures, so none is ever dropped here.
 * A frame the engine refuses fails its clip with the engine's error; a crash fails the batch (failover retries it).
 */
function framesFromImages(model: LoadedModel, encoder: ClipEncoder | undefined): LoadedModel {
  const cancelListeners = new Set<(jobIds: readonly string[]) => void>();
  /** Clips whose frames must stop (cancelled, or their encoder failed), and the frame request each clip has out. */
  const stopped = new Set<string>();
  const current = new Map<string, string>();
  const stop = (jobIds: readonly string[]): void => {
    const frames: string[] = [];
    for (const jobId of jobIds) {
      stopped.add(jobId);
      const frame = current.get(jobId);
      if (frame) frames.push(frame);
    }
    if (frames.length > 0) model.cancel(frames);
  };

  const renderClips = async (jobs: readonly EngineJob[], onFrame: FrameSink, onProgress: (progress: Progress) => void): Promise<{ outputs: JobOutput[]; memory: BatchMemory }> => {
    const total = jobs.reduce((sum, job) => sum + Number(job.input.frames), 0);
    let done = 0;
    const memory: BatchMemory = { peakMB: model.memoryMB, residentMB: model.memoryMB };
    const outputs: JobOutput[] = [];
    for (const job of jobs) {
      const { prompt, seed, frames, width, height, steps, negativePrompt, image, strength } = job.input as Record<string, unknown>;
      // The clip's starting picture, as the agent fetched and decoded it, is every frame's.
      const picture = image === undefined ? {} : { image, ...(strength === undefined ? {} : { strength }) };
      const started = performance.now();
      let failed: JobOutput | null = null;
      for (let index = 0; index < Number(frames) && !stopped.has(job.id); index++) {
        const frameId = `${job.id}.frame-${index}`;
        current.set(job.id, frameId);
        const input = { prompt, seed: (Number(seed) + index) >>> 0, width, height, steps, ...(negativePrompt ? { negativePrompt } : {}), ...picture };
        let result: BatchResult;
        try {
          result = await model.run([{ id: frameId, input, deadlineAt: job.deadlineAt ?? null, ...(job.pictures ? { pictures: job.pictures } : {}) }], () => {});
        } finally {
          current.delete(job.id);
        }
        if (result.memory) {
          memory.peakMB = Math.max(memory.peakMB, result.memory.peakMB);
          memory.residentMB = result.memory.residentMB;
        }
        const output = result.outputs[0];
        if (!output?.ok) {
          failed = output
            ? { ...output, jobId: job.id, message: `frame ${index + 1} of ${Number(frames)}: ${output.message}` }
            : { jobId: job.id, ok: false, code: 'ENGINE_FAILED', message: `frame ${index + 1}: the engine returned no output`, retryable: true };
          break;
        }
        const image = output.files.find((file) => file.mediaType.startsWith('image/'));
        if (!image) {
          failed = { jobId: job.id, ok: false, code: 'ENGINE_FAILED', message: `frame ${index + 1}: the engine returned no image`, retryable: false };
          break;
        }
        // The engine's image may not be the size asked for (a server that rounds to multiples of 64): the clip's is.
        const rgb = await sharp(image.bytes).removeAlpha().resize(Number(width), Number(height), { fit: 'fill' }).raw().toBuffer();
        await onFrame(job.id, index, rgb);
        onProgress({ step: ++done, total });
      }
      outputs.push(failed ?? (stopped.has(job.id)
        ? { jobId: job.id, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false }
        : { jobId: job.id, ok: true, files: [], result: { generateMs: Math.round(performance.now() - started) } }));
    }
    return { outputs, memory };
  };

  return {
    manifest: model.manifest,
    device: model.device,
    memoryMB: model.memoryMB,
    exited: model.exited,
    ...(model.idleUnloadMs !== undefined ? { idleUnloadMs: model.idleUnloadMs } : {}),
    ...(model.startup ? { startup: model.startup } : {}),
    run: async (jobs, onProgress) => {
      for (const job of jobs) stopped.delete(job.id);
      let listener: ((jobIds: readonly string[]) => void) | null = null;
      try {
        return await encodeClips({
          jobs, encoder: encoder ?? null, onProgress,
          cancel: stop,
          onCancel: (registered) => cancelListeners.add((listener = registered)),
          render: (onFrame) => renderClips(jobs, onFrame, onProgress),
        });
      } catch (error) {
        throw error instanceof EngineError ? error : new EngineError('ENGINE_FAILED', `making the clip's frames failed: ${(error as Error).message}`, true, { cause: error });
      } finally {
        if (listener) cancelListeners.delete(listener);
      }
    },
    cancel: (jobIds) => {
      stop(jobIds);
      for (const listener of cancelListeners) listener(jobIds);
    },
    unload: () => model.unload(),
  };
}
