import type { InferenceSession } from 'onnxruntime-node';
import * as ort from 'onnxruntime-node';
import sharp from 'sharp';
import { coordsFor, GEN_LATENT_DIM, latentFor } from '../../../models/index.js';
import type { ModelManifest } from '../../../protocol/index.js';
import { EngineError, type EngineJob, type JobOutput, type Progress } from '../engine.js';
import type { OnnxPipeline } from './settings.js';

export interface PipelineRun {
  session: InferenceSession;
  manifest: ModelManifest;
  jobs: readonly EngineJob[];
  onProgress(progress: Progress): void;
  isCancelled(jobId: string): boolean;
}

const sameShape = (jobs: readonly EngineJob[], keys: readonly string[]): boolean =>
  jobs.every((job) => keys.every((key) => job.input[key] === jobs[0]!.input[key]));

/**
 * The CPPN generator: one session.run per refinement step for the whole batch;
 * the canvas of step s feeds step s+1, so every step is real work and real progress.
 */
async function cppnImage(run: PipelineRun): Promise<JobOutput[]> {
  const { session, jobs } = run;
  if (!sameShape(jobs, ['width', 'height', 'steps'])) {
    throw new EngineError('INVALID_INPUT', 'jobs of one batch must share width, height and steps', false);
  }
  const first = jobs[0]!.input;
  const width = Number(first.width);
  const height = Number(first.height);
  const steps = Number(first.steps);
  const batch = jobs.length;
  const pixels = width * height;
  const latent = new Float32Array(batch * GEN_LATENT_DIM);
  jobs.forEach((job, index) => latent.set(latentFor(String(job.input.prompt), Number(job.input.seed)), index * GEN_LATENT_DIM));
  const feeds: Record<string, ort.Tensor> = {
    latent: new ort.Tensor('float32', latent, [batch, GEN_LATENT_DIM]),
    coords: new ort.Tensor('float32', coordsFor(width, height), [pixels, 3]),
    canvas: new ort.Tensor('float32', new Float32Array(batch * pixels * 3), [batch, pixels, 3]),
  };
  let rgb: Uint8Array | null = null;
  for (let step = 0; step < steps; step++) {
    if (jobs.every((job) => run.isCancelled(job.id))) break;
    feeds.octave = new ort.Tensor('float32', new Float32Array([step]), [1]);
    const last = step === steps - 1;
    const outputs = await session.run(feeds, last ? ['canvas_out', 'rgb'] : ['canvas_out']);
    feeds.canvas = outputs.canvas_out!;
    if (last) rgb = outputs.rgb!.data as Uint8Array;
    run.onProgress({ step: step + 1, total: steps });
  }
  return Promise.all(jobs.map(async (job, index): Promise<JobOutput> => {
    if (run.isCancelled(job.id) || !rgb) return { jobId: job.id, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false };
    const slice = Buffer.from(rgb.buffer, rgb.byteOffset + index * pixels * 3, pixels * 3);
    const png = await sharp(slice, { raw: { width, height, channels: 3 } }).png().toBuffer();
    return { jobId: job.id, ok: true, files: [{ bytes: png, mediaType: 'image/png', width, height }] };
  }));
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
  tensor,
};
