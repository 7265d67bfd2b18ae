import { LIMITS } from '../../../protocol/index.js';
import { BodyInvalid, type BodyIssue } from './errors.js';

/**
 * A1111's txt2img and img2img bodies (`modules/api/models.py`: every argument of its processing classes, all
 * optional, plus the API's own), read as its pydantic models read them: a value of another type is coerced where
 * pydantic (v1, as A1111 pins it) would — `"20"` for an int, `1` for a flag — else the field is a 422 issue; keys it
 * does not know are ignored (SillyTavern posts its own `url` and `auth` along). The mesh's image jobs take the prompt,
 * negative prompt, seed, size, steps and, for img2img, the start picture, mask and strength; the rest is accepted,
 * echoed in `parameters` and recorded in `info`, and changes nothing.
 */
type Kind = 'int' | 'float' | 'bool' | 'str' | 'list' | 'dict';

interface Field {
  kind: Kind;
  /** A1111's default, echoed in `parameters` when the body leaves the field out. */
  default: unknown;
}

const field = (kind: Kind, value: unknown = null): Field => ({ kind, default: value });

/** StableDiffusionProcessing's arguments the API takes, and the API's own. */
const COMMON: Record<string, Field> = {
  prompt: field('str', ''), negative_prompt: field('str', ''), styles: field('list'), seed: field('int', -1), subseed: field('int', -1),
  subseed_strength: field('float', 0), seed_resize_from_h: field('int', -1), seed_resize_from_w: field('int', -1), sampler_name: field('str'),
  scheduler: field('str'), batch_size: field('int', 1), n_iter: field('int', 1), steps: field('int', 50), cfg_scale: field('float', 7),
  width: field('int', 512), height: field('int', 512), restore_faces: field('bool'), tiling: field('bool'), do_not_save_samples: field('bool', false),
  do_not_save_grid: field('bool', false), eta: field('float'), denoising_strength: field('float'), s_min_uncond: field('float'), s_churn: field('float'),
  s_tmax: field('float'), s_tmin: field('float'), s_noise: field('float'), override_settings: field('dict'), override_settings_restore_afterwards: field('bool', true),
  refiner_checkpoint: field('str'), refiner_switch_at: field('float'), disable_extra_networks: field('bool', false), firstpass_image: field('str'),
  comments: field('dict'), sampler_index: field('str', 'Euler'), script_name: field('str'), script_args: field('list', []), send_images: field('bool', true),
  save_images: field('bool', false), alwayson_scripts: field('dict', {}), force_task_id: field('str'), infotext: field('str'),
};

const FIELDS = {
  txt2img: {
    ...COMMON, enable_hr: field('bool', false), denoising_strength: field('float', 0.75), firstphase_width: field('int', 0), firstphase_height: field('int', 0),
    hr_scale: field('float', 2), hr_upscaler: field('str'), hr_second_pass_steps: field('int', 0), hr_resize_x: field('int', 0), hr_resize_y: field('int', 0),
    hr_checkpoint_name: field('str'), hr_sampler_name: field('str'), hr_scheduler: field('str'), hr_prompt: field('str', ''), hr_negative_prompt: field('str', ''),
  },
  img2img: {
    ...COMMON, init_images: field('list'), resize_mode: field('int', 0), denoising_strength: field('float', 0.75), image_cfg_scale: field('float'), mask: field('str'),
    mask_blur_x: field('int', 4), mask_blur_y: field('int', 4), mask_blur: field('int'), mask_round: field('bool', true), inpainting_fill: field('int', 0),
    inpaint_full_res: field('bool', true), inpaint_full_res_padding: field('int', 0), inpainting_mask_invert: field('int', 0), initial_noise_multiplier: field('float'),
    latent_mask: field('str'), include_init_images: field('bool', false),
  },
} satisfies Record<string, Record<string, Field>>;

/** The generation fields of each route, for the API document. */
export const FIELD_KINDS = {
  txt2img: Object.fromEntries(Object.entries(FIELDS.txt2img).map(([name, { kind }]) => [name, kind])) as Record<string, Kind>,
  img2img: Object.fromEntries(Object.entries(FIELDS.img2img).map(([name, { kind }]) => [name, kind])) as Record<string, Kind>,
};

export type GenerationKind = keyof typeof FIELDS;

/** What a txt2img or img2img request asks of the mesh, once read. */
export interface GenerationRequest {
  kind: GenerationKind;
  /** Every field of A1111's model as the request set it or by default, as A1111 echoes it (img2img's pictures left out). */
  parameters: Record<string, unknown>;
  prompt: string;
  negativePrompt: string;
  /** Null: a random one (A1111's −1). */
  seed: number | null;
  batchSize: number;
  nIter: number;
  /** Null: the model's own size. */
  size: { width: number; height: number } | null;
  /** The steps the jobs take (undefined: the model's default), after any clamp to the mesh's most. */
  steps: number | undefined;
  samplerName: string;
  scheduler: string | null;
  cfgScale: number;
  /** `override_settings.sd_model_checkpoint`: this request's model. */
  checkpoint: string | undefined;
  /** `override_settings_restore_afterwards: false`: the checkpoint stays the caller's choice after the request. */
  keepCheckpoint: boolean;
  sendImages: boolean;
  /** img2img: the picture to start from (base64 or a data: URL), an optional mask (white repaints) and the strength. */
  initImage?: string;
  mask?: string;
  maskInvert: boolean;
  strength?: number;
  /** What the mesh did otherwise than asked, for `info`'s extra_generation_params (a clamped step count). */
  notes: Record<string, string>;
}

const TYPE_ERRORS: Record<Kind, [msg: string, type: string]> = {
  int: ['value is not a valid integer', 'type_error.integer'],
  float: ['value is not a valid float', 'type_error.float'],
  bool: ['value could not be parsed to a boolean', 'type_error.bool'],
  str: ['str type expected', 'type_error.str'],
  list: ['value is not a valid list', 'type_error.list'],
  dict: ['value is not a valid dict', 'type_error.dict'],
};

const TRUE_WORDS = new Set(['1', 'on', 't', 'true', 'y', 'yes']);
const FALSE_WORDS = new Set(['0', 'off', 'f', 'false', 'n', 'no']);
const NOT_COERCED = Symbol('not coerced');

/** A value as pydantic v1 reads it into a field of this kind, or NOT_COERCED. */
function coerce(kind: Kind, value: unknown): unknown {
  switch (kind) {
    case 'int': {
      const number = typeof value === 'string' && /^\s*[+-]?\d{1,20}\s*$/.test(value) ? Number(value) : value;
      return typeof number === 'number' && Number.isInteger(number) ? number : NOT_COERCED;
    }
    case 'float': {
      const number = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
      return typeof number === 'number' && Number.isFinite(number) ? number : NOT_COERCED;
    }
    case 'bool':
      if (typeof value === 'boolean') return value;
      if (value === 0 || value === 1) return value === 1;
      if (typeof value === 'string' && TRUE_WORDS.has(value.toLowerCase())) return true;
      return typeof value === 'string' && FALSE_WORDS.has(value.toLowerCase()) ? false : NOT_COERCED;
    case 'str':
      return typeof value === 'string' ? value : typeof value === 'number' && Number.isFinite(value) ? String(value) : NOT_COERCED;
    case 'list':
      return Array.isArray(value) ? value : NOT_COERCED;
    case 'dict':
      return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : NOT_COERCED;
  }
}

/** Each known field of the body, coerced, or its default; every field of a wrong type is an issue. */
function readFields(kind: GenerationKind, body: Record<string, unknown>, issues: BodyIssue[]): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(FIELDS[kind] as Record<string, Field>)) {
    const given = Object.hasOwn(body, name) ? body[name] : null;
    if (given === null || given === undefined) {
      values[name] = spec.default;
      continue;
    }
    const value = coerce(spec.kind, given);
    if (value === NOT_COERCED) {
      const [msg, type] = TYPE_ERRORS[spec.kind];
      issues.push({ loc: ['body', name], msg, type });
      values[name] = spec.default;
    } else {
      values[name] = value;
    }
  }
  return values;
}

const given = (body: Record<string, unknown>, name: string): boolean => body[name] !== null && body[name] !== undefined;

/**
 * Read a txt2img or img2img body (BodyInvalid with every issue, FastAPI's 422). The mesh's own bounds apply on top of
 * A1111's types: a prompt (an empty one makes no picture here), sides from LIMITS.imageSide, a seed of 32 bits, and at
 * most LIMITS.imagesPerRequest pictures (batch_size × n_iter). Steps above LIMITS.steps.max are run at the most and
 * said so in `info` — rather than refused — because A1111's default, which Open WebUI sends, is 50.
 */
export function readGeneration(kind: GenerationKind, body: unknown): GenerationRequest {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new BodyInvalid([{ loc: ['body'], msg: 'value is not a valid dict', type: 'type_error.dict' }]);
  const raw = body as Record<string, unknown>;
  const issues: BodyIssue[] = [];
  const values = readFields(kind, raw, issues);
  const problem = (name: (string | number)[], msg: string, type: string, ctx?: Record<string, unknown>): void => {
    issues.push({ loc: ['body', ...name], msg, type, ...(ctx ? { ctx } : {}) });
  };
  const within = (name: string, min: number, max: number, why: string): void => {
    const value = values[name] as number;
    if (!given(raw, name) || issues.some((issue) => issue.loc[1] === name)) return;
    if (value < min) problem([name], `ensure this value is greater than or equal to ${min} (${why})`, 'value_error.number.not_ge', { limit_value: min });
    else if (value > max) problem([name], `ensure this value is less than or equal to ${max} (${why})`, 'value_error.number.not_le', { limit_value: max });
  };

  const prompt = (values.prompt as string).trim();
  if (prompt === '') problem(['prompt'], 'the mesh makes pictures from a prompt: give one', 'value_error.missing');
  for (const name of ['prompt', 'negative_prompt']) {
    if ((values[name] as string).length > LIMITS.promptChars) {
      problem([name], `ensure this value has at most ${LIMITS.promptChars} characters`, 'value_error.any_str.max_length', { limit_value: LIMITS.promptChars });
    }
  }
  const side = LIMITS.imageSide;
  within('width', side.min, side.max, 'the mesh\'s sides');
  within('height', side.min, side.max, 'the mesh\'s sides');
  within('seed', -1, 0xffffffff, '−1 for a random one, else 32 bits');
  within('batch_size', 1, LIMITS.imagesPerRequest, 'pictures a request');
  within('n_iter', 1, LIMITS.imagesPerRequest, 'pictures a request');
  within('steps', LIMITS.steps.min, Number.MAX_SAFE_INTEGER, 'a step at least');
  const batchSize = values.batch_size as number;
  const nIter = values.n_iter as number;
  if (batchSize * nIter > LIMITS.imagesPerRequest && !issues.some((issue) => ['batch_size', 'n_iter'].includes(String(issue.loc[1])))) {
    problem(['batch_size'], `batch_size × n_iter is ${batchSize * nIter}; the mesh makes at most ${LIMITS.imagesPerRequest} pictures a request`, 'value_error.number.not_le', { limit_value: LIMITS.imagesPerRequest });
  }
  const overrides = (values.override_settings ?? {}) as Record<string, unknown>;
  const checkpoint = overrides.sd_model_checkpoint;
  if (checkpoint !== undefined && checkpoint !== null && typeof checkpoint !== 'string') problem(['override_settings', 'sd_model_checkpoint'], 'str type expected', 'type_error.str');

  const notes: Record<string, string> = {};
  let steps = given(raw, 'steps') ? values.steps as number : undefined;
  if (steps !== undefined && steps > LIMITS.steps.max) {
    notes['Steps asked'] = `${steps}, run at the mesh's most (${LIMITS.steps.max})`;
    steps = LIMITS.steps.max;
  }
  if (values.enable_hr === true) notes['Hires fix'] = 'not on the mesh: the picture is made at its size';

  const picture = kind === 'img2img' ? readPictures(values, issues) : { maskInvert: false };
  if (issues.length > 0) throw new BodyInvalid(issues);

  const parameters = { ...values };
  if (kind === 'img2img') {
    // As A1111 answers: the pictures sent are not sent back unless asked; the flag itself is not echoed.
    if (values.include_init_images !== true) Object.assign(parameters, { init_images: null, mask: null });
    delete parameters.include_init_images;
  }
  const seed = values.seed as number;
  return {
    kind, parameters, prompt, negativePrompt: values.negative_prompt as string,
    seed: seed === -1 ? null : seed, batchSize, nIter,
    size: given(raw, 'width') || given(raw, 'height') ? { width: values.width as number, height: values.height as number } : null,
    steps,
    samplerName: (values.sampler_name ?? values.sampler_index ?? 'Euler') as string,
    scheduler: values.scheduler as string | null,
    cfgScale: values.cfg_scale as number,
    checkpoint: typeof checkpoint === 'string' ? checkpoint : undefined,
    keepCheckpoint: values.override_settings_restore_afterwards === false,
    sendImages: values.send_images as boolean,
    ...picture,
    notes,
  };
}

/** img2img's pictures: one to start from (the mesh's image-to-image starts from one), a mask, and the strength. */
function readPictures(values: Record<string, unknown>, issues: BodyIssue[]): Pick<GenerationRequest, 'initImage' | 'mask' | 'maskInvert' | 'strength'> {
  const images = values.init_images as unknown[] | null;
  if (!images || images.length === 0) {
    issues.push({ loc: ['body', 'init_images'], msg: 'field required: the picture to start from, base64 (or a data: URL)', type: 'value_error.missing' });
  } else if (images.length > 1) {
    issues.push({ loc: ['body', 'init_images'], msg: `${images.length} pictures; the mesh's image-to-image starts from one`, type: 'value_error.list.max_items', ctx: { limit_value: 1 } });
  } else if (typeof images[0] !== 'string') {
    issues.push({ loc: ['body', 'init_images', 0], msg: 'str type expected', type: 'type_error.str' });
  }
  const strength = values.denoising_strength as number;
  if (strength < 0 || strength > 1) {
    issues.push({ loc: ['body', 'denoising_strength'], msg: 'ensure this value is from 0 (keep the picture) to 1 (repaint it all)', type: 'value_error.number.not_in_range' });
  }
  const invert = values.inpainting_mask_invert as number;
  if (invert !== 0 && invert !== 1) issues.push({ loc: ['body', 'inpainting_mask_invert'], msg: 'ensure this value is 0 (white repaints) or 1 (black repaints)', type: 'value_error.const' });
  return {
    ...(typeof images?.[0] === 'string' ? { initImage: images[0] } : {}),
    ...(typeof values.mask === 'string' && values.mask !== '' ? { mask: values.mask } : {}),
    maskInvert: invert === 1,
    strength,
  };
}
