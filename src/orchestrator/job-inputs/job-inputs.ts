import { randomInt } from 'node:crypto';
import { controlMarkupIn, type EngineDescriptor } from '../../protocol/engines/index.js';
import { parseInput } from './parse-input.js';
import { workflow } from './workflow-inputs.js';
import { checkNamedTensors, namedTensorsCost, namedTensorsKey, namedTensorsProbe, type NamedTensorInput } from './named-tensors.js';
import { INPUT_IMAGE_FIELDS, INPUT_SCHEMAS, LIMITS, MeshError, type ModelManifest, type TensorInput } from '../../protocol/index.js';

/**
 * What the orchestrator must know about a job type's input (its input handling, by job type; not to be confused with
 * the ONNX engine's `settings.pipeline`, the agent's), whatever engine runs the model: how to check it and fill its defaults (so the stored job is
 * reproducible) and which inputs may share a batch. Jobs share a batch only
 * when their compatibility keys are equal. Defaults come from the model's
 * `params` where it has them (`defaultWidth`, `defaultHeight`, `defaultSteps`).
 */
export interface JobInputs {
  /** `pictures` tells the size of a picture an input names (admission checked it decodes); absent, a picture's size is not known. */
  normalize(input: Record<string, unknown>, manifest: ModelManifest, pictures?: PictureSizes): Record<string, unknown>;
  compatKey(input: Record<string, unknown>): string;
  /** The smallest real input for a health probe: one job through the normal path that proves the replica still runs. */
  probeInput(manifest: ModelManifest): Record<string, unknown>;
  /**
   * The relative work of one job (a normalized input), so run times measured on some inputs predict others:
   * attempt timeouts divide a batch's cost by the replica's measured cost per second. Jobs that may share a batch cost the same.
   */
  cost(input: Record<string, unknown>): number;
}

/** The size of a picture an input names by digest, as decoding found it (null: not a picture, or not known). */
export type PictureSizes = (digest: string) => { width: number; height: number } | null;

/** A picture's size scaled to fit the image limits, keeping its shape: the default size of an image-to-image job. */
function fitted(size: { width: number; height: number }): { width: number; height: number } {
  const { min, max } = LIMITS.imageSide;
  const scale = Math.min(1, max / Math.max(size.width, size.height));
  const side = (value: number): number => Math.max(min, Math.min(max, Math.round(value * scale)));
  return { width: side(size.width), height: side(size.height) };
}


/** A model's numeric parameter, or the fallback. */
const param = (manifest: ModelManifest, key: string, fallback: number): number => {
  const value = Number(manifest.params[key]);
  return Number.isFinite(value) && value > 0 ? value : fallback;
};

const image: JobInputs = {
  normalize(input, manifest, pictures) {
    const image = parseInput(INPUT_SCHEMAS.image, input, manifest.name);
    // Image-to-image: the picture's own size (fitted to the limits) unless the job names one.
    const start = image.image !== undefined ? pictures?.(image.image) ?? null : null;
    const size = start ? fitted(start) : { width: param(manifest, 'defaultWidth', 256), height: param(manifest, 'defaultHeight', 256) };
    return {
      prompt: image.prompt,
      // A job without a seed gets a fresh one, recorded so the image can be made again.
      seed: image.seed ?? randomInt(0, 0xffffffff),
      width: image.width ?? size.width,
      height: image.height ?? size.height,
      steps: image.steps ?? param(manifest, 'defaultSteps', 6),
      ...(image.negativePrompt ? { negativePrompt: image.negativePrompt } : {}),
      ...(image.image !== undefined ? { image: image.image, strength: image.strength ?? LIMITS.defaultStrength } : {}),
      ...(image.mask !== undefined ? { mask: image.mask } : {}),
      ...(image.previews ? { previews: image.previews } : {}),
    };
  },
  // Image size and step count fix the tensor shapes and the number of forward passes; image-to-image starts at the
  // step its strength gives, which the whole batch shares.
  compatKey: (input) => `${String(input.width)}x${String(input.height)}x${String(input.steps)}${input.image === undefined ? '' : `@${String(refinementSteps(input))}`}`,
  // The smallest picture the input schema allows, one step; a model whose server wants other sizes names them in params.
  // Each refinement step computes every pixel once.
  cost: (input) => Number(input.width) * Number(input.height) * refinementSteps(input),
  probeInput: (manifest) => ({
    prompt: 'gpumesh health probe', seed: 1,
    width: Number(manifest.params.probeWidth ?? 8), height: Number(manifest.params.probeHeight ?? 8), steps: Number(manifest.params.probeSteps ?? 1),
  }),
};

/** The refinement steps an image job runs: all of them, or for image-to-image the last `strength` of them (at least one). */
function refinementSteps(input: Record<string, unknown>): number {
  const steps = Number(input.steps);
  return input.image === undefined ? steps : Math.max(1, Math.ceil(steps * Number(input.strength)));
}

/**
 * A clip from an image model: each frame is one image (the same size and steps), so a frame's cost is an image's
 * and a clip's is `frames` of them. Limits beyond the schema's: pixels per frame and per clip, named in the error.
 */
const video: JobInputs = {
  normalize(input, manifest) {
    const clip = parseInput(INPUT_SCHEMAS.video, input, manifest.name);
    const width = clip.width ?? param(manifest, 'defaultWidth', 256);
    const height = clip.height ?? param(manifest, 'defaultHeight', 256);
    const frames = clip.frames ?? param(manifest, 'defaultFrames', 48);
    const { pixelsPerFrame, pixelsPerClip } = LIMITS.video;
    if (width * height > pixelsPerFrame) {
      throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: `width × height: ${width}×${height} is ${width * height} pixels a frame; the limit is ${pixelsPerFrame}` });
    }
    if (width * height * frames > pixelsPerClip) {
      throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: `frames: ${frames} frames of ${width}×${height} are ${width * height * frames} pixels; the limit for a clip is ${pixelsPerClip}` });
    }
    return {
      prompt: clip.prompt,
      seed: clip.seed ?? randomInt(0, 0xffffffff),
      frames,
      fps: clip.fps ?? param(manifest, 'defaultFps', 24),
      width, height,
      steps: clip.steps ?? param(manifest, 'defaultSteps', 6),
      // A clip from a picture: every frame starts from it (sized to the clip, not the clip to it: a clip's sides are even).
      ...(clip.image !== undefined ? { image: clip.image, strength: clip.strength ?? LIMITS.defaultStrength } : {}),
    };
  },
  // A batch of clips runs one clip after another; clips of one shape share a batch as images do.
  compatKey: (input) => `${String(input.width)}x${String(input.height)}x${String(input.steps)}x${String(input.frames)}${input.image === undefined ? '' : `@${String(input.strength)}`}`,
  cost: (input) => Number(input.width) * Number(input.height) * Number(input.steps) * Number(input.frames),
  // The shortest, smallest clip the schema allows: it still runs the encoder, which is what a video replica needs.
  probeInput: () => ({ prompt: 'gpumesh health probe', seed: 1, frames: LIMITS.video.frames.min, fps: 1, width: LIMITS.video.side.min, height: LIMITS.video.side.min, steps: 1 }),
};

/**
 * Exactly what the tensor schema accepts ({ x: 1 to LIMITS.tensorValues finite numbers } and nothing else), checked
 * in one pass: zod's parse of an array allocates for every value it checks, which under load was the largest
 * allocation of a submit (7 KB for 64 values). Anything this refuses goes through the schema, which words the error.
 */
function isTensorInput(input: Record<string, unknown>): input is TensorInput {
  const { x } = input;
  if (!Array.isArray(x) || x.length < 1 || x.length > LIMITS.tensorValues) return false;
  for (const key in input) if (key !== 'x') return false;
  for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i])) return false;
  return true;
}

/**
 * A tensor job: for a model that declares its inputs (one added with `gpumesh models add`, read from its ONNX file),
 * named tensors of any datatype and shape it allows (named-tensors.ts); for the older form, one flat `x`.
 */
const tensor: JobInputs = {
  normalize(input, manifest) {
    if (manifest.inputs?.length) return checkNamedTensors(input, manifest) as unknown as Record<string, unknown>;
    const parsed = isTensorInput(input) ? input : parseInput(INPUT_SCHEMAS.tensor, input, manifest.name);
    // A model that declares its width (`params.inputDim`) refuses other widths here; one that does not leaves it to its server.
    const width = Number(manifest.params.inputDim);
    if (manifest.params.inputDim !== undefined && parsed.x.length !== width) {
      throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: `x has ${parsed.x.length} values; the model takes ${width}` });
    }
    return { x: parsed.x };
  },
  // Every sample of the older form has the model's fixed width, so any two can share a batch; named tensors share
  // one when all but their first dimension agree.
  compatKey: (input) => ('inputs' in input ? namedTensorsKey(input as unknown as NamedTensorInput) : ''),
  // Without a declared width, one value: a server that wants another width refuses it as INVALID_INPUT (no verdict).
  probeInput: (manifest) => (manifest.inputs?.length
    ? namedTensorsProbe(manifest) as unknown as Record<string, unknown>
    : { x: new Array<number>(Math.floor(param(manifest, 'inputDim', 1))).fill(0) }),
  cost: (input) => ('inputs' in input ? namedTensorsCost(input as unknown as NamedTensorInput) : 1),
};

/**
 * Text in a picture: the input is the picture's digest alone (admission checks it is stored, decoded and the grant's
 * to read). Any two pictures may share a batch — the engine pads them to a common size for the detector and pads
 * every line found to a common width for the recogniser.
 */
const ocr: JobInputs = {
  normalize: (input, manifest) => ({ image: parseInput(INPUT_SCHEMAS.ocr, input, manifest.name).image }),
  compatKey: () => '',
  // A probe names no picture: the engine reads a small blank one, which runs both models (and finds no text).
  probeInput: () => ({}),
  // The picture's size is not in the input; a batch's time is mostly the detector's, about the same per picture.
  cost: () => 1,
};

/** Input handling by job type: a model serves the job types in its manifest, and each type's handling checks its jobs. */
export const JOB_INPUTS = {
  image,
  video,
  tensor,
  ocr,
  workflow,
} as const satisfies Readonly<Record<string, JobInputs>>;

/** The input handling of a job type, if the orchestrator has one. */
export function jobInputsFor(jobType: string): JobInputs | undefined {
  return Object.hasOwn(JOB_INPUTS, jobType) ? JOB_INPUTS[jobType as keyof typeof JOB_INPUTS] : undefined;
}

/**
 * A model's input handling: its job type's, refusing at admission client text that carries its engine's control markup
 * (protocol/engines/markup.ts) — a 400 naming the field and the markup, before the job is stored. The engine on the
 * agent refuses it again: neither side trusts the other with it.
 */
export function jobInputsForEngine(inputs: JobInputs, engine: EngineDescriptor | undefined): JobInputs {
  if (!engine) return inputs;
  return {
    ...inputs,
    normalize(input, manifest, pictures) {
      const normalized = inputs.normalize(input, manifest, pictures);
      const problem = controlMarkupIn(normalized, engine);
      if (problem) throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: problem });
      // A picture an engine would not look at must not be silently dropped: the client expects it used.
      const taken = picturesTaken(engine, manifest);
      const picture = INPUT_IMAGE_FIELDS.find((field) => normalized[field] !== undefined && !taken.includes(field));
      if (picture && engine.pictureRefusal) {
        throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: `${picture}: ${engine.pictureRefusal(picture)}` });
      }
      if (picture) {
        throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: `${picture}: the ${engine.name} engine does not take pictures as inputs; send the job to a model that does (the built-in gen does image-to-image)` });
      }
      return normalized;
    },
  };
}

/** The picture fields a model of `engine` takes: all, none, or those its settings give a place (a ComfyUI workflow's LoadImage node). */
function picturesTaken(engine: EngineDescriptor, manifest: ModelManifest): readonly string[] {
  if (typeof engine.pictureInputs === 'function') return engine.pictureInputs(manifest.settings ?? {});
  return engine.pictureInputs ? INPUT_IMAGE_FIELDS : [];
}
