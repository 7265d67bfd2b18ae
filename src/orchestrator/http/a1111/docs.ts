import { z } from 'zod';
import { errorResponses, json, type RouteDocs } from '../openapi.js';
import { FIELD_KINDS } from './requests.js';

/**
 * The A1111 door's bodies and answers in /openapi.json. The generation routes read their bodies themselves
 * (`readGeneration`: A1111's types, coerced as pydantic does, 422 per field), so these describe them for the document.
 */

const KIND_SCHEMAS = {
  int: () => z.int(), float: () => z.number(), bool: () => z.boolean(), str: () => z.string(),
  list: () => z.array(z.unknown()), dict: () => z.record(z.string(), z.unknown()),
} as const;

/** A generation body: every field A1111 takes, all optional; other keys are ignored. */
const bodyOf = (kinds: Record<string, keyof typeof KIND_SCHEMAS>, notes: Record<string, string>) => z.looseObject(Object.fromEntries(
  Object.entries(kinds).map(([name, kind]) => [name, (notes[name] ? KIND_SCHEMAS[kind]().describe(notes[name]) : KIND_SCHEMAS[kind]()).nullable().optional()]),
));

const COMMON_NOTES: Record<string, string> = {
  prompt: 'What the pictures show (the mesh needs one)',
  negative_prompt: 'What they should not show (engines that support it)',
  seed: '-1 (the default): a random one; picture i is made with seed + i',
  width: 'Pixels, 8 to 1024; left out: the model\'s own size',
  height: 'Pixels, 8 to 1024; left out: the model\'s own size',
  steps: 'Refinement steps; above 32 (the mesh\'s most) they are run at 32 and info says so; left out: the model\'s default',
  batch_size: 'Pictures per iteration: batch_size × n_iter is at most 10 (one mesh job each)',
  n_iter: 'Iterations: batch_size × n_iter is at most 10',
  override_settings: 'sd_model_checkpoint picks this request\'s model (a title, model name or hash from sd-models); the rest is ignored',
  override_settings_restore_afterwards: 'false: the checkpoint of override_settings stays the caller\'s choice',
  sampler_name: 'Recorded in info; the engines run their own sampler',
  send_images: 'false: the answer carries no pictures (they are in the gallery)',
};

export const TXT2IMG_BODY = bodyOf(FIELD_KINDS.txt2img, COMMON_NOTES);
export const IMG2IMG_BODY = bodyOf(FIELD_KINDS.img2img, {
  ...COMMON_NOTES,
  init_images: 'One picture to start from: base64 or a data: URL of a PNG, JPEG or WebP (the mesh fetches no URLs)',
  mask: 'Optional: base64 of a picture whose white repaints (black with inpainting_mask_invert 1; or, with transparency, where it is opaque)',
  denoising_strength: 'How far the result may move from the picture: 0 keeps it, 1 repaints it all (default 0.75)',
});

/** FastAPI's answer to a body it cannot validate. */
const ValidationError = z.object({
  detail: z.array(z.object({ loc: z.array(z.union([z.string(), z.int()])), msg: z.string(), type: z.string(), ctx: z.record(z.string(), z.unknown()).optional() })),
});
/** A1111's answer to any other error: the mesh's code in `error`. */
const A1111Error = z.object({
  error: z.string().describe('a code of the error registry (docs/errors.md), e.g. GRANT_MISSING'),
  detail: z.string(),
  body: z.string(),
  errors: z.string().describe('"<status>: <message>"'),
});

const GRANT_ANSWERS = {
  ...errorResponses(A1111Error, {
    401: 'No grant (as the Basic password, or a Bearer token), or one that is not valid; WWW-Authenticate: Basic',
    403: 'The grant may not make image jobs',
  }),
};

const GenerationAnswer = z.object({
  images: z.array(z.string()).describe('PNG, base64'),
  parameters: z.record(z.string(), z.unknown()).describe('every field of the request as read, defaults filled (img2img\'s pictures left out)'),
  info: z.string().describe('JSON: seed, all_seeds, prompt, width, height, steps, sd_model_name, infotexts, job_ids, …'),
});

function generationDocs(body: z.ZodType, what: string): RouteDocs {
  return {
    body: { 'application/json': body },
    responses: {
      200: json(`The pictures once their jobs have ended (${what})`, GenerationAnswer),
      ...GRANT_ANSWERS,
      ...errorResponses(A1111Error, {
        400: 'A model that is not one the grant may use (UNKNOWN_MODEL), or a picture the mesh will not decode (IMAGE_REFUSED)',
        413: 'The body is larger than its limit',
        415: 'A body that is not JSON',
        429: "The model's or the mesh's queue is full, or the grant's rate is spent (Retry-After)",
        500: 'A job failed (ENGINE_FAILED names it and its error)',
        504: 'The pictures did not come within 10 minutes; the jobs go on',
      }),
      422: { description: 'A field of the wrong type or out of the mesh\'s bounds (FastAPI\'s list of issues); or the job is larger than any host can run', content: { 'application/json': z.union([ValidationError, A1111Error]) } },
    },
  };
}

export const TXT2IMG_DOCS = generationDocs(TXT2IMG_BODY, 'text to image');
export const IMG2IMG_DOCS = generationDocs(IMG2IMG_BODY, 'image to image from init_images[0]');

export const OPTIONS_BODY = z.record(z.string(), z.unknown()).describe('The options object (the whole of it, as Open WebUI posts it back, or some keys): sd_model_checkpoint switches the caller\'s model; other keys are ignored');

export const SET_OPTIONS_DOCS: RouteDocs = {
  body: { 'application/json': OPTIONS_BODY },
  responses: {
    200: { description: 'Done (A1111 answers null)', content: { 'application/json': { type: 'object', nullable: true, description: 'null' } } },
    ...GRANT_ANSWERS,
    ...errorResponses(A1111Error, { 400: 'sd_model_checkpoint names no image model the grant may use (UNKNOWN_MODEL)' }),
    422: { description: 'Not a JSON object, or sd_model_checkpoint not a string', content: { 'application/json': ValidationError } },
  },
};

/** A read route's docs: its answer and the grant's refusals. */
export const readDocs = (description: string, schema: z.ZodType): RouteDocs => ({ responses: { 200: json(description, schema), ...GRANT_ANSWERS } });

export const Options = z.looseObject({ sd_model_checkpoint: z.string().nullable().describe('the caller\'s model: a title from sd-models') });
export const Progress = z.object({
  progress: z.number().describe('0 to 1, the caller\'s pictures being made'),
  eta_relative: z.number().describe('seconds left, estimated'),
  state: z.object({
    skipped: z.boolean(), interrupted: z.boolean(), stopping_generation: z.boolean(), job: z.string(), job_count: z.int(), job_timestamp: z.string(),
    job_no: z.int(), sampling_step: z.int(), sampling_steps: z.int(),
  }),
  current_image: z.string().nullable().describe('the newest preview (PNG, base64)'),
  textinfo: z.string().nullable(),
});
export const SdModels = z.array(z.object({
  title: z.string(), model_name: z.string(), hash: z.string().nullable(), sha256: z.string().nullable(), filename: z.string(), config: z.string().nullable(),
}));
export const Samplers = z.array(z.object({ name: z.string(), aliases: z.array(z.string()), options: z.record(z.string(), z.unknown()) }));
export const Schedulers = z.array(z.object({ name: z.string(), label: z.string(), aliases: z.array(z.string()).nullable(), default_rho: z.number().nullable(), need_inner_model: z.boolean().nullable() }));
export const Upscalers = z.array(z.object({ name: z.string(), model_name: z.string().nullable(), model_path: z.string().nullable(), model_url: z.string().nullable(), scale: z.number().nullable() }));
export const Named = z.array(z.object({ name: z.string() }));
export const Vaes = z.array(z.object({ model_name: z.string(), filename: z.string() }));
export const Loras = z.array(z.object({ name: z.string(), alias: z.string(), path: z.string(), metadata: z.record(z.string(), z.unknown()) }));
export const Flags = z.record(z.string(), z.unknown());

/** `/interrupt` (A1111 answers `{}`) and `/skip` (null). */
export const stopDocs = (description: string): RouteDocs => ({
  responses: {
    200: { description, content: { 'application/json': { type: 'object', nullable: true } } },
    ...errorResponses(A1111Error, { 401: 'No grant, or one that is not valid', 403: 'The grant may not cancel image jobs' }),
  },
});

