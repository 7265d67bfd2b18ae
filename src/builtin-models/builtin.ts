/**
 * The models gpumesh carries inside itself: built by code on first use,
 * cached per process, content-addressed by SHA-256.
 */
import { sha256Digest } from '../protocol/digest.js';
import {
  GEN_CHANNELS,
  GEN_COORD_DIM,
  GEN_DEFAULT_STEPS,
  GEN_LATENT_DIM,
  buildGenerator,
} from './generator.js';
import { MLP_INPUT_DIM, MLP_OUTPUT_DIM, buildTensorMlp } from './tensor-mlp.js';
import { SIMPLE_DIM, buildSimple } from './simple.js';

/** Shape and element type of one model input or output. */
export interface TensorSpec {
  name: string;
  dtype: 'float32' | 'uint8' | 'int32';
  /** Fixed sizes, or symbolic names: 'batch' (axis 0, batchable) and 'pixels'. */
  shape: Array<number | string>;
  description: string;
}

export interface BuiltinModel {
  name: string;
  version: string;
  engine: 'onnx';
  /** generator: images; video: clips from the same network (frames walking its latent space); tensor: plain rows. */
  kind: 'generator' | 'video' | 'tensor' | 'named-tensors';
  jobTypes: string[];
  /** The ONNX file. Shared per process: do not modify. */
  bytes: Uint8Array;
  /** 'sha256:<hex>' of `bytes`. */
  digest: string;
  /**
   * Resident memory in MiB once loaded in onnxruntime (CPU) and run at its
   * typical size (gen: one 256×256 image; mlp: batch 8), measured as RSS growth.
   * gen needs more for larger batches / images: about 46 MiB per extra 256×256 image.
   */
  memoryMB: number;
  description: string;
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  /** gen only: refinement steps of a full render (octave 0 .. defaultSteps-1). */
  defaultSteps?: number;
  /** Threads for its ONNX session (OnnxSettings.threads); absent: onnxruntime's choice, one per core. */
  threads?: number;
  /** Run its ONNX session in the agent's own process (OnnxSettings.process `agent`): for models that answer in microseconds. */
  inAgentProcess?: boolean;
}

/*
 * memoryMB, measured with onnxruntime-node 1.30 (CPU EP, default session options) as
 * RSS growth over creating the session and running it, after onnxruntime itself
 * was initialised (that one-time runtime footprint, ~27 MiB, is not included):
 *   gen  one 256×256 image, 6 steps: 123 MiB (4 images: 261 MiB; one 64×64: 7 MiB)
 *   mlp  batch 8 (or 64): under 1 MiB
 * Most of gen's figure is the CPU arena holding [pixels, 32] activations.
 */
const GEN_MEMORY_MB = 128;
const MLP_MEMORY_MB = 4;


let cache: BuiltinModel[] | undefined;

/** The built-in models (`gen`, `gen-video`, `mlp`). Built once per process; returns fresh descriptor objects sharing the bytes. */
export function builtinModels(): BuiltinModel[] {
  cache ??= [makeGen(), makeGenVideo(), makeMlp(), makeSimple()];
  return cache.map((m) => ({
    ...m,
    jobTypes: [...m.jobTypes],
    inputs: m.inputs.map((t) => ({ ...t, shape: [...t.shape] })),
    outputs: m.outputs.map((t) => ({ ...t, shape: [...t.shape] })),
  }));
}

/** One built-in model by name, or undefined. */
export function builtinModel(name: string): BuiltinModel | undefined {
  return builtinModels().find((m) => m.name === name);
}

function makeGen(): BuiltinModel {
  const bytes = buildGenerator();
  return {
    name: 'gen',
    version: '1.0.0',
    engine: 'onnx',
    kind: 'generator',
    jobTypes: ['image'],
    bytes,
    digest: sha256Digest(bytes),
    memoryMB: GEN_MEMORY_MB,
    description:
      'Text-to-image CPPN. latentFor(prompt, seed) fixes the image; run once per step s = 0..steps-1 with ' +
      'octave = [s], feeding canvas_out back as canvas (zeros at s = 0); rgb is the image after that step.',
    defaultSteps: GEN_DEFAULT_STEPS,
    inputs: [
      { name: 'latent', dtype: 'float32', shape: ['batch', GEN_LATENT_DIM], description: 'latentsFor(items)' },
      { name: 'coords', dtype: 'float32', shape: ['pixels', GEN_COORD_DIM], description: 'coordsFor(width, height), shared by the batch' },
      { name: 'canvas', dtype: 'float32', shape: ['batch', 'pixels', GEN_CHANNELS], description: 'zeros at step 0, then the previous canvas_out' },
      { name: 'octave', dtype: 'float32', shape: [1], description: 'the step index s, shared by the batch' },
    ],
    outputs: [
      { name: 'canvas_out', dtype: 'float32', shape: ['batch', 'pixels', GEN_CHANNELS], description: 'canvas + band s' },
      { name: 'rgb', dtype: 'uint8', shape: ['batch', 'pixels', GEN_CHANNELS], description: 'row-major RGB image of canvas_out' },
    ],
  };
}

/**
 * `gen-video`: the same network and file as `gen` (the same digest: agents pull and cache it once), served for video
 * jobs. A model of its own because a model has one job type's pipeline, one queue and one batching policy, and a clip
 * (dozens of images and an encoder run) is a different workload from one image: it batches alone and its
 * throughput is learned apart. Frame f of n renders the latent walked f/n of the way round a loop from
 * latentFor(prompt, seed) (walkLatent), so frame 0 is gen's image of the same prompt and seed.
 */
function makeGenVideo(): BuiltinModel {
  const gen = makeGen();
  return {
    ...gen,
    name: 'gen-video',
    kind: 'video',
    jobTypes: ['video'],
    description: 'Text-to-video with the gen network: frame f of n is gen\'s image of walkLatent(prompt, seed, f, n), encoded by ffmpeg (H.264 MP4, yuv420p) with a PNG poster.',
    // One session holds a chunk of frames at a time (the ONNX engine's frame chunk), like a batch of four images.
    memoryMB: 2 * GEN_MEMORY_MB,
  };
}

function makeMlp(): BuiltinModel {
  const bytes = buildTensorMlp();
  return {
    name: 'mlp',
    version: '1.0.0',
    engine: 'onnx',
    kind: 'tensor',
    jobTypes: ['tensor'],
    bytes,
    digest: sha256Digest(bytes),
    memoryMB: MLP_MEMORY_MB,
    // Too small to split: one thread runs a one-sample job in half the time, and batches as fast (OnnxSettings.threads).
    threads: 1,
    description: 'Tensor MLP 64→256→256→16 (ReLU), for measuring dynamic batching.',
    inputs: [{ name: 'x', dtype: 'float32', shape: ['batch', MLP_INPUT_DIM], description: 'input rows' }],
    outputs: [{ name: 'y', dtype: 'float32', shape: ['batch', MLP_OUTPUT_DIM], description: 'output rows' }],
  };
}

/** Triton's `simple` (simple.ts): what OIP/KServe clients call first; its tensors are named, so jobs send them by name. */
function makeSimple(): BuiltinModel {
  const bytes = buildSimple();
  const int32 = (name: string, description: string): TensorSpec => ({ name, dtype: 'int32', shape: ['batch', SIMPLE_DIM], description });
  return {
    name: 'simple',
    version: '1',
    engine: 'onnx',
    kind: 'named-tensors',
    jobTypes: ['tensor'],
    bytes,
    digest: sha256Digest(bytes),
    memoryMB: MLP_MEMORY_MB,
    threads: 1,
    // Microseconds of compute: the hop to a worker process and back would be most of its time (OnnxSettings.process).
    inAgentProcess: true,
    description: 'Triton\'s simple example: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, INT32 [batch, 16].',
    inputs: [int32('INPUT0', 'the first addend'), int32('INPUT1', 'the second')],
    outputs: [int32('OUTPUT0', 'INPUT0 + INPUT1'), int32('OUTPUT1', 'INPUT0 - INPUT1')],
  };
}
