import { z } from 'zod';
import type { EngineDescriptor } from './descriptor.js';

/** The ways the ONNX worker turns a batch of job inputs into tensors and the outputs back into results (pipelines.ts). */
export const ONNX_PIPELINES = ['cppn-image', 'cppn-video', 'tensor', 'tensors', 'ocr'] as const;
export type OnnxPipeline = (typeof ONNX_PIPELINES)[number];

/**
 * `settings` of a model the built-in ONNX engine runs. The options type is the
 * configuration reference: every field says its default.
 */
export const OnnxSettings = z.strictObject({
  /**
   * How the worker feeds the model: `cppn-image`, the built-in generator's refinement loop (one session.run per
   * step, the canvas fed back); `cppn-video`, the same loop over a clip's frames (the latent walked per frame, frames
   * rendered a chunk at a time and piped to ffmpeg on the agent, `video` jobs); or `tensor`, a plain model with one input `x` of `params.inputDim` values per job and
   * one output `y` (a batch is stacked along axis 0); or `tensors`, any model with the inputs and outputs its manifest
   * names (read from its ONNX file by `gpumesh models add`), batched along the first dimension when every input has a
   * variable one; or `ocr`, text in pictures (`ocr` jobs) from a model of three files named `detector` (a DB text
   * detector), `recognizer` (a CTC recogniser taking [N, 3, 48, W]) and `dictionary` (its characters, one a line),
   * such as PaddleOCR's. Required.
   */
  pipeline: z.enum(ONNX_PIPELINES),
  /** How the `ocr` pipeline reads; every field has PaddleOCR's default. */
  ocr: z.strictObject({
    /** The detector sees a picture with its longer side at most this many pixels (shrunk, never enlarged). Default 960. */
    limitSide: z.int().min(32).max(4096).default(960),
    /** A pixel of the detector's map is text above this probability. Default 0.3. */
    threshold: z.number().min(0).max(1).default(0.3),
    /** A box is kept when the mean probability inside it reaches this. Default 0.6. */
    boxThreshold: z.number().min(0).max(1).default(0.6),
    /** How far a box grows back out (DB predicts shrunk regions): its area × this ÷ its perimeter. Default 1.5. */
    unclipRatio: z.number().min(0).max(10).default(1.5),
    /** Lines read with less confidence are left out. Default 0.5. */
    minConfidence: z.number().min(0).max(1).default(0.5),
    /**
     * Lines per recogniser run: the lines of all the batch's pictures, sorted by width, this many at a time (a run of
     * 4–8 is the cheapest per line on a CPU; every line in one run pads short lines to the longest). Default 6.
     */
    linesPerRun: z.int().min(1).max(256).default(6),
  }).prefault({}),
  /**
   * Let onnxruntime's worker threads spin between and within runs instead of sleeping. Spinning makes back-to-back
   * large batches about a quarter faster, but burns the cores while the model waits: on a host where the agent and
   * the orchestrator share few cores it takes the CPU they need to deliver results (a 2-core machine spent 4 ms of
   * CPU spinning per 0.05 ms tensor job). Default false; set true on a host with cores to spare.
   */
  spinning: z.boolean().default(false),
  /**
   * Threads one session.run may use (onnxruntime's intra-op threads). Default: onnxruntime's choice, one per core.
   * A small model runs faster on one: splitting its few small matrix products across threads costs more in
   * hand-offs than it saves, and each hand-off waits for a core the orchestrator may hold. The built-in `mlp`
   * (64→256→256→16) runs a one-sample job in about half the time on one thread on a 2-core machine, with the same
   * throughput in batches (bench/RESULTS.md); an image model like `gen` wants every core.
   */
  threads: z.number().int().min(1).max(256).optional(),
  /**
   * Where the model's onnxruntime session lives: `worker`, a worker process per device (the agent can reap it and
   * all its memory by ending it, an onnxruntime crash ends only it, its memory is measured on its own); or `agent`,
   * the agent's own process, which saves a process hop each way on every batch (about a tenth of a millisecond, a
   * tenth of a tiny model's round trip through the mesh: bench/RESULTS.md, *Open Inference Protocol infer*). For
   * models of a few kilobytes that answer in microseconds; what such a model holds is then measured as part of the
   * agent's memory, and a crash of onnxruntime takes the agent with it. Default `worker`.
   */
  process: z.enum(['worker', 'agent']).default('worker'),
});
export type OnnxSettings = z.infer<typeof OnnxSettings>;

/**
 * The files a model of each ONNX pipeline must hold, by name, and what each is: a `network` (an ONNX file the worker
 * makes a session of) or `data` it reads as bytes. A model of one file holds no named ones.
 */
export const ONNX_PIPELINE_FILES: Readonly<Partial<Record<OnnxPipeline, Readonly<Record<string, 'network' | 'data'>>>>> = {
  ocr: { detector: 'network', recognizer: 'network', dictionary: 'data' },
};

/**
 * Whether a member of a model of several files is a network (an ONNX file a session is made of): its pipeline says so
 * (the `ocr` pipeline's `detector` and `recognizer`), or its name ends in `.onnx` (a protobuf has no signature to
 * sniff). Anything else is data: read as bytes (a dictionary), or opened by onnxruntime as a network's external data.
 */
export function isNetworkMember(name: string, pipeline: string): boolean {
  const role = ONNX_PIPELINE_FILES[pipeline as OnnxPipeline]?.[name];
  return role ? role === 'network' : name.endsWith('.onnx');
}

/** The built-in ONNX Runtime engine: one worker process per device. Its text is seeds for a generator, never read as instructions. */
export const onnxDescriptor: EngineDescriptor<typeof OnnxSettings> = {
  name: 'onnx', settings: OnnxSettings, server: false, needsFile: true, nativeVideo: true, pictureInputs: true, controlMarkup: [],
  filesFor: (settings) => Object.keys(ONNX_PIPELINE_FILES[settings.pipeline as OnnxPipeline] ?? {}),
  // A model in the agent's own process runs outside the worker's confinement: the host's call, not a model's.
  hostSettingsOf: (settings) => (settings.process === 'agent' ? ['process'] : []), hostDeclared: false,
};
