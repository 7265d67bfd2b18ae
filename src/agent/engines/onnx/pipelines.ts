import type { InferenceSession } from 'onnxruntime-node';
import * as ort from 'onnxruntime-node';
import { canvasFor, coordsFor, GEN_LATENT_DIM, latentFor, walkLatent } from '../../../builtin-models/index.js';
import type { ModelManifest } from '../../../protocol/index.js';
import { EngineError, type EngineJob, type InputPicture, type JobOutput, type Progress } from '../../core/engine.js';
import { namedTensors } from './named-tensors.js';
import { encodePng } from './png.js';
import type { OnnxPipeline } from '../../../protocol/engines/onnx.js';
import { ocrJobs, ocrModelsOf } from './ocr/jobs.js';

/** A model of several files, as loaded: each member by name, a network as its session, anything else as its bytes. */
export type ModelParts = Readonly<Record<string, InferenceSession | Uint8Array>>;

export interface PipelineRun {
  /** The model's network (of a model of several files, its first network by name). */
  session: InferenceSession;
  /** Every member of a model of several files (empty for a model of one file). */
  parts: ModelParts;
  manifest: ModelManifest;
  jobs: readonly EngineJob[];
  onProgress(progress: Progress): void;
  isCancelled(jobId: string): boolean;
  /** Hand one frame of a clip to the agent; resolves when the worker may render more (the agent's window has room). */
  emitFrame(jobId: string, index: number, rgb: Uint8Array): Promise<void>;
}

const sameShape = (jobs: readonly EngineJob[], keys: readonly string[]): boolean =>
  jobs.every((job) => keys.every((key) => job.input[key] === jobs[0]!.input[key]));

/**
 * The CPPN generator: the refinement loop (render) over the whole batch, one PNG per job. Image-to-image starts from
 * the job's picture (the canvas whose display is closest to it) and runs only the last `strength` of the steps, so
 * the coarse shapes stay the picture's and the finer bands are the prompt's; a mask keeps what it covers.
 */
async function cppnImage(run: PipelineRun): Promise<JobOutput[]> {
  const { session, jobs } = run;
  if (!sameShape(jobs, ['width', 'height', 'steps']) || new Set(jobs.map(firstStep)).size > 1) {
    throw new EngineError('INVALID_INPUT', 'jobs of one batch must share width, height, steps and the step image-to-image starts at', false);
  }
  const first = jobs[0]!.input;
  const width = Number(first.width);
  const height = Number(first.height);
  const steps = Number(first.steps);
  const pixels = width * height;
  const latent = new Float32Array(jobs.length * GEN_LATENT_DIM);
  jobs.forEach((job, index) => latent.set(latentFor(String(job.input.prompt), Number(job.input.seed)), index * GEN_LATENT_DIM));
  const canvas = new Float32Array(jobs.length * pixels * 3);
  jobs.forEach((job, index) => {
    const picture = job.pictures?.image;
    if (picture) canvas.set(canvasFor(pictureOfSize(picture, width, height, 3)), index * pixels * 3);
  });
  const from = firstStep(jobs[0]!);
  const previewSteps = new Map(jobs.map((job) => [job.id, previewStepsOf(Number(job.input.previews ?? 0), from, steps)]));
  const rgb = await render(session, latent, coordsFor(width, height), steps, {
    stop: () => jobs.every((job) => run.isCancelled(job.id)),
    step: (step) => run.onProgress({ step, total: steps }),
    wantsPicture: (step) => jobs.some((job) => previewSteps.get(job.id)!.has(step)),
    picture: async (step, pictures) => {
      const previews = await Promise.all(jobs.filter((job) => previewSteps.get(job.id)!.has(step) && !run.isCancelled(job.id)).map(async (job) => {
        const index = jobs.indexOf(job);
        return { jobId: job.id, png: await encodePng(Buffer.from(pictures.buffer, pictures.byteOffset + index * pixels * 3, pixels * 3), width, height) };
      }));
      run.onProgress({ step, total: steps, previews });
    },
  }, { canvas, from });
  return Promise.all(jobs.map(async (job, index): Promise<JobOutput> => {
    if (run.isCancelled(job.id) || !rgb) return cancelled(job.id);
    const slice = Buffer.from(rgb.buffer, rgb.byteOffset + index * pixels * 3, pixels * 3);
    const { image, mask } = job.pictures ?? {};
    if (image && mask) keepMasked(slice, pictureOfSize(image, width, height, 3), pictureOfSize(mask, width, height, 1));
    const png = await encodePng(slice, width, height);
    return { jobId: job.id, ok: true, files: [{ bytes: png, mediaType: 'image/png', width, height }] };
  }));
}

/**
 * After which steps (1-based, as progress counts them) a job asking for `count` previews gets one: spread evenly over
 * the steps it runs, never the last (that picture is the result). Fewer when the job runs fewer steps.
 */
function previewStepsOf(count: number, from: number, steps: number): Set<number> {
  const run = steps - from;
  const chosen = new Set<number>();
  for (let i = 1; i <= count; i++) {
    const step = from + Math.round((i * run) / (count + 1));
    if (step > from && step < steps) chosen.add(step);
  }
  return chosen;
}

/** The step a job's refinement starts at: 0, or for image-to-image the first of the last `strength` of its steps. */
function firstStep(job: EngineJob): number {
  const steps = Number(job.input.steps);
  if (job.input.image === undefined) return 0;
  return steps - Math.max(1, Math.ceil(steps * Number(job.input.strength)));
}

/** A decoded picture's pixels, checked to be what the batch renders (the agent sizes them to the job). */
function pictureOfSize(picture: InputPicture, width: number, height: number, channels: 1 | 3): Uint8Array {
  if (picture.width !== width || picture.height !== height || picture.channels !== channels) {
    throw new EngineError('INVALID_INPUT', `an input picture is ${picture.width}×${picture.height}×${picture.channels}; the job renders ${width}×${height}×${channels}`, false);
  }
  return picture.data;
}

/** Where the mask is opaque the picture stays; where it is transparent the render shows; between, a blend. */
function keepMasked(rgb: Buffer, picture: Uint8Array, mask: Uint8Array): void {
  for (let p = 0; p < mask.length; p++) {
    const keep = mask[p]! / 255;
    for (let c = 0; c < 3; c++) rgb[p * 3 + c] = Math.round(rgb[p * 3 + c]! * (1 - keep) + picture[p * 3 + c]! * keep);
  }
}

const cancelled = (jobId: string): JobOutput => ({ jobId, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false });

/**
 * The refinement loop for one batch of latents ([batch, GEN_LATENT_DIM]): one session.run per step, the canvas of
 * step s fed to step s+1, so every step is real work and real progress. The RGB of the last step, or null if
 * `stop` said so before it.
 */
async function render(
  session: InferenceSession, latent: Float32Array, coords: Float32Array, steps: number,
  on: { stop(): boolean; step(step: number): void; wantsPicture?(step: number): boolean; picture?(step: number, rgb: Uint8Array): Promise<void> },
  start: { canvas?: Float32Array; from: number } = { from: 0 },
): Promise<Uint8Array | null> {
  const batch = latent.length / GEN_LATENT_DIM;
  const pixels = coords.length / 3;
  const feeds: Record<string, ort.Tensor> = {
    latent: new ort.Tensor('float32', latent, [batch, GEN_LATENT_DIM]),
    coords: new ort.Tensor('float32', coords, [pixels, 3]),
    canvas: new ort.Tensor('float32', start.canvas ?? new Float32Array(batch * pixels * 3), [batch, pixels, 3]),
  };
  let rgb: Uint8Array | null = null;
  for (let step = start.from; step < steps; step++) {
    if (on.stop()) return null;
    feeds.octave = new ort.Tensor('float32', new Float32Array([step]), [1]);
    const last = step === steps - 1;
    const preview = !last && (on.wantsPicture?.(step + 1) ?? false);
    const outputs = await session.run(feeds, last || preview ? ['canvas_out', 'rgb'] : ['canvas_out']);
    feeds.canvas = outputs.canvas_out!;
    if (last) rgb = outputs.rgb!.data as Uint8Array;
    if (preview) await on.picture!(step + 1, outputs.rgb!.data as Uint8Array);
    else on.step(step + 1);
  }
  return rgb;
}

/**
 * Pixels rendered in one session.run of a clip: frames go through the network a chunk at a time (a batch of
 * frames, as images of one batch would), so memory stays that of a four-image batch of 256×256 however long the clip.
 */
const FRAME_CHUNK_PIXELS = 4 * 256 * 256;

/**
 * A clip per job (`video` jobs of `gen-video`), one job after another: frame f of n renders walkLatent(prompt,
 * seed, f, n) — frame 0 is the image `cppn-image` makes of the same prompt and seed; with a starting `image`, what
 * image-to-image makes of it (every frame starts from the picture) — in chunks of frames, each
 * frame sent to the agent as soon as its chunk is done. Progress counts frames over the batch. The files come
 * from the agent's encoder; the worker's output carries how long generation took.
 */
async function cppnVideo(run: PipelineRun): Promise<JobOutput[]> {
  const { session, jobs } = run;
  const total = jobs.reduce((sum, job) => sum + Number(job.input.frames), 0);
  let done = 0;
  const outputs: JobOutput[] = [];
  for (const job of jobs) {
    const started = performance.now();
    const { prompt, seed, frames, width, height, steps } = {
      prompt: String(job.input.prompt), seed: Number(job.input.seed), frames: Number(job.input.frames),
      width: Number(job.input.width), height: Number(job.input.height), steps: Number(job.input.steps),
    };
    const pixels = width * height;
    const coords = coordsFor(width, height);
    const chunk = Math.max(1, Math.min(frames, Math.floor(FRAME_CHUNK_PIXELS / pixels)));
    // A clip from a picture: every frame starts from the picture's canvas and runs only the last `strength` of the
    // steps with its own latent, so the picture's coarse shapes hold through the clip and frame 0 is derived from it.
    const picture = job.pictures?.image;
    const start = picture ? { canvas: canvasFor(pictureOfSize(picture, width, height, 3)), from: firstStep(job) } : null;
    let waitedMs = 0;
    let stopped = false;
    for (let first = 0; first < frames && !stopped; first += chunk) {
      const count = Math.min(chunk, frames - first);
      const latent = new Float32Array(count * GEN_LATENT_DIM);
      for (let i = 0; i < count; i++) latent.set(walkLatent(prompt, seed, first + i, frames), i * GEN_LATENT_DIM);
      const canvas = start ? new Float32Array(count * pixels * 3) : undefined;
      if (start) for (let i = 0; i < count; i++) canvas!.set(start.canvas, i * pixels * 3);
      const rgb = await render(session, latent, coords, steps, { stop: () => run.isCancelled(job.id), step: () => {} }, start ? { canvas, from: start.from } : undefined);
      if (!rgb) {
        stopped = true;
        break;
      }
      for (let i = 0; i < count; i++) {
        // A copy per frame: the chunk's buffer belongs to onnxruntime, and a frame crosses to the agent on its own.
        const frame = new Uint8Array(rgb.subarray(i * pixels * 3, (i + 1) * pixels * 3));
        const waitStart = performance.now();
        await run.emitFrame(job.id, first + i, frame);
        waitedMs += performance.now() - waitStart;
        run.onProgress({ step: ++done, total });
      }
    }
    if (stopped || run.isCancelled(job.id)) {
      outputs.push(cancelled(job.id));
      continue;
    }
    // Time spent waiting for the encoder to take frames is the encoder's, not generation's.
    outputs.push({ jobId: job.id, ok: true, files: [], result: { generateMs: Math.round(performance.now() - started - waitedMs) } });
  }
  return outputs;
}

/** A plain tensor model: stack each job's `x` along the batch axis, one run, split `y` back. */
async function tensor(run: PipelineRun): Promise<JobOutput[]> {
  const { session, jobs, manifest } = run;
  const inputDim = Number(manifest.params.inputDim);
  const x = new Float32Array(jobs.length * inputDim);
  for (const [index, job] of jobs.entries()) {
    const values = job.input.x;
    if (!Array.isArray(values) || values.length !== inputDim) {
      throw new EngineError('INVALID_INPUT', `x must hold ${inputDim} numbers`, false);
    }
    x.set(values as number[], index * inputDim);
  }
  const outputs = await session.run({ x: new ort.Tensor('float32', x, [jobs.length, inputDim]) });
  const y = outputs.y!;
  const outputDim = Number(y.dims[1]);
  const data = y.data as Float32Array;
  // One forward pass: no intermediate progress worth a message per batch.
  return jobs.map((job, index) => ({
    jobId: job.id, ok: true, files: [],
    result: { y: Array.from(data.subarray(index * outputDim, (index + 1) * outputDim)), shape: [outputDim] },
  }));
}

/** The ONNX engine's pipelines, chosen by the model's `settings.pipeline`. */
export const PIPELINES: Record<OnnxPipeline, (run: PipelineRun) => Promise<JobOutput[]>> = {
  'cppn-image': cppnImage,
  'cppn-video': cppnVideo,
  tensor,
  // Any model with the inputs and outputs its manifest names (a model added with `gpumesh models add`).
  tensors: (run) => namedTensors(run.session, run.manifest, run.jobs),
  // Text in pictures: a detector, a recogniser and a dictionary, each a file of the model (ocr/).
  ocr: (run) => {
    const { models, options } = ocrModelsOf(run.parts, run.manifest);
    return ocrJobs(models, options, run.jobs, { isCancelled: run.isCancelled, encodePng });
  },
};
