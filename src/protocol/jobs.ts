import { z } from 'zod';
import { WorkflowInput } from './workflows.js';

/**
 * A job's states. `waiting`: it takes another job's output (a reference, `{ fromJob, output }`) and waits for that job
 * to succeed; then it is `queued` like any other.
 */
export const JOB_STATUSES = ['waiting', 'queued', 'dispatched', 'running', 'succeeded', 'failed', 'cancelled', 'expired'] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
export const TERMINAL_STATUSES: ReadonlySet<JobStatus> = new Set(['succeeded', 'failed', 'cancelled', 'expired']);
export const isTerminal = (status: JobStatus): boolean => TERMINAL_STATUSES.has(status);

/** Limits on what one request may carry; bodies beyond them are refused with 400/413. */
export const LIMITS = {
  /** `Prefer: wait=N` on a submit: the longest a request may wait for its job to end (s). */
  preferWaitSeconds: 60,
  promptChars: 2000,
  imageSide: { min: 8, max: 1024 },
  steps: { min: 1, max: 32 },
  /** Pictures one request of an image front door makes (OpenAI's `n`, A1111's `batch_size × n_iter`): one job each. */
  imagesPerRequest: 10,
  /** A video job: frames, frames per second, and pixels per frame (a smaller cap than an image: every frame is one). */
  video: { frames: { min: 2, max: 600 }, fps: { min: 1, max: 60 }, side: { min: 16, max: 1024 }, pixelsPerFrame: 512 * 512, pixelsPerClip: 50_000_000 },
  tensorValues: 65536,
  idempotencyKeyChars: 200,
  /** A pipeline (`POST /v1/pipelines`): its steps, and the longest chain of steps that take one another's outputs. */
  pipeline: { steps: 16, depth: 8 },
  /** Jobs in one bulk submit (`POST /v1/jobs:batch`). */
  bulkJobs: 1000,
  /** Largest body of a bulk submit. */
  bulkBodyBytes: 16 * 1024 * 1024,
  /**
   * How deep a JSON body (or an OIP inference header) may nest arrays and objects: a tensor's data nests once per
   * dimension (at most 16), a job's input a few levels more. Deeper is 400 NESTING_TOO_DEEP, counted without recursion
   * before anything else walks the body (a 100,000-deep array once overflowed the stack flattening a tensor).
   */
  jsonDepth: 64,
  /**
   * A picture a job starts from (`image`, `mask`): the formats decoded, and the most pixels one may hold once decoded
   * (a decompression bomb is refused by its header, before its pixels are allocated).
   */
  inputImage: { formats: ['png', 'jpeg', 'webp'] as const, maxPixels: 4096 * 4096 },
  /** How much of an input picture image-to-image keeps when a job does not say (0: all of it, 1: none). */
  defaultStrength: 0.6,
} as const;

/** A blob named by its content: `sha256:` and 64 lower-case hex digits. */
export const BlobDigest = z.string().regex(/^sha256:[0-9a-f]{64}$/, 'must be a blob digest, sha256:<64 hex> (store the file with PUT /v1/blobs first)');

/**
 * Another job's output as a job's input, by reference: `{ "fromJob": "j_…", "output": 0 }` in a picture field. `output`
 * counts the source's outputs in the order its view lists them (its `artifacts`), among those of media type `artifact`
 * when the reference names one (`"artifact": "image/png"`: a clip's poster). The dependent job waits (`waiting`) until
 * its source succeeds, then starts from that output's digest; it fails when its source does not succeed.
 */
export const JobReference = z.strictObject({
  fromJob: z.string().regex(/^j_[A-Za-z0-9_-]{1,96}$/, 'must be a job id (j_…)'),
  output: z.int().min(0).max(63).default(0),
  artifact: z.string().regex(/^[a-z]+\/[a-z0-9.+-]+$/, 'must be a media type (image/png)').max(100).optional(),
});
export type JobReference = z.infer<typeof JobReference>;

/** Input fields that name a picture by digest: the orchestrator checks them at admission, the agent fetches and decodes them. */
export const INPUT_IMAGE_FIELDS = ['image', 'mask'] as const;
export type InputImageField = (typeof INPUT_IMAGE_FIELDS)[number];

/**
 * Every picture an input names by digest, with the field that names it: `image` and `mask`, and a workflow's
 * `pictures` by their names in it (`pictures.photo.png`). Values that are not digests (another job's output by
 * reference, a malformed field) are left to the input's schema.
 */
export function picturesIn(input: unknown): { field: string; digest: string }[] {
  if (input === null || typeof input !== 'object') return [];
  const record = input as Record<string, unknown>;
  const found: { field: string; digest: string }[] = [];
  for (const field of INPUT_IMAGE_FIELDS) {
    const digest = record[field];
    if (typeof digest === 'string') found.push({ field, digest });
  }
  const pictures = record.pictures;
  if (pictures !== null && typeof pictures === 'object' && !Array.isArray(pictures)) {
    for (const [name, digest] of Object.entries(pictures)) if (typeof digest === 'string') found.push({ field: `pictures.${name}`, digest });
  }
  return found;
}

export const ImageInput = z.strictObject({
  prompt: z.string().trim().min(1, 'prompt must not be empty').max(LIMITS.promptChars),
  seed: z.int().min(0).max(0xffffffff).optional(),
  width: z.int().min(LIMITS.imageSide.min).max(LIMITS.imageSide.max).optional(),
  height: z.int().min(LIMITS.imageSide.min).max(LIMITS.imageSide.max).optional(),
  steps: z.int().min(LIMITS.steps.min).max(LIMITS.steps.max).optional(),
  /** What the picture should not show; used by engines that support it (sd.cpp, A1111), ignored by the others. */
  negativePrompt: z.string().max(LIMITS.promptChars).optional(),
  /** Image-to-image: the picture (a blob digest) the refinement starts from; its size is the default size. */
  image: BlobDigest.optional(),
  /** Where the picture may change: a PNG whose transparent pixels mark what to repaint (OpenAI's convention); the rest is kept. */
  mask: BlobDigest.optional(),
  /** How far the result may move from `image`: 0 keeps it, 1 repaints it all. */
  strength: z.number().min(0).max(1).optional(),
  /** Pictures of the refinement so far, sent as `preview` events while the job runs (engines that can: the built-in gen). */
  previews: z.int().min(0).max(3).optional(),
}).refine((input) => input.image !== undefined || (input.mask === undefined && input.strength === undefined), {
  message: 'mask and strength need an image to start from', path: ['image'],
});
export type ImageInput = z.infer<typeof ImageInput>;

/**
 * A clip: `frames` images walking the generator's latent space from the prompt, played at `fps`. Sides are even
 * (H.264 in yuv420p halves the colour planes) and a frame holds at most `LIMITS.video.pixelsPerFrame` pixels.
 */
const videoSide = z.int().min(LIMITS.video.side.min).max(LIMITS.video.side.max).refine((side) => side % 2 === 0, 'must be even (H.264 in yuv420p)');
export const VideoInput = z.strictObject({
  prompt: z.string().trim().min(1, 'prompt must not be empty').max(LIMITS.promptChars),
  seed: z.int().min(0).max(0xffffffff).optional(),
  frames: z.int().min(LIMITS.video.frames.min).max(LIMITS.video.frames.max).optional(),
  fps: z.int().min(LIMITS.video.fps.min).max(LIMITS.video.fps.max).optional(),
  width: videoSide.optional(),
  height: videoSide.optional(),
  /** Refinement steps per frame. */
  steps: z.int().min(LIMITS.steps.min).max(LIMITS.steps.max).optional(),
  /** A picture (a blob digest) the clip starts from: every frame's coarse shapes are the picture's, frame 0 first of all. */
  image: BlobDigest.optional(),
  /** How far each frame may move from `image`: 0 keeps it, 1 repaints it all. */
  strength: z.number().min(0).max(1).optional(),
}).refine((input) => input.image !== undefined || input.strength === undefined, {
  message: 'strength needs an image to start from', path: ['image'],
});
export type VideoInput = z.infer<typeof VideoInput>;

export const TensorInput = z.strictObject({
  /** One sample: a flat list of numbers whose length the model fixes. */
  x: z.array(z.number().finite()).min(1).max(LIMITS.tensorValues),
});
export type TensorInput = z.infer<typeof TensorInput>;

/** Text in a picture (`ocr` jobs): the picture, stored first with PUT /v1/blobs, by digest. */
const OcrInput = z.strictObject({
  image: BlobDigest,
});

/** Each job type's input schema; a job type is served only if it appears here and in the config. */
export const INPUT_SCHEMAS = {
  image: ImageInput,
  video: VideoInput,
  tensor: TensorInput,
  ocr: OcrInput,
  /** A whole ComfyUI workflow (protocol/workflows.ts), for models whose host's owner opted in (`acceptWorkflows`). */
  workflow: WorkflowInput,
} as const;

export const SubmitJobBody = z.strictObject({
  type: z.string().min(1).max(40),
  model: z.string().min(1).max(100).optional(),
  /** Checked against the job type's schema once the type is known. */
  input: z.record(z.string(), z.unknown()),
  /** 1 is the highest; the config sets how many levels there are. */
  priority: z.int().min(1).max(100).optional(),
  idempotencyKey: z.string().min(1).max(LIMITS.idempotencyKeyChars).optional(),
  /** The job ends `expired` if it has not finished this many ms after it was accepted. */
  timeoutMs: z.int().min(1).max(7 * 24 * 3600 * 1000).optional(),
  /** The gallery album the result is published to. */
  album: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/i).optional(),
  /**
   * Where the job's end is POSTed, signed (Standard Webhooks): a URL mesh.yaml's `webhooks.allow` allows. Default: the
   * grant's `webhook` caveat, if any (a grant with one allows no other URL).
   */
  webhook: z.string().min(1).max(2000).optional(),
});
export type SubmitJobBody = z.infer<typeof SubmitJobBody>;
