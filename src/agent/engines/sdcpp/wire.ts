import { z } from 'zod';
import { formatError } from '../../../protocol/index.js';
import { EngineError } from '../../core/engine.js';
import type { ImageRequest } from '../kit/image-input.js';
import type { SdcppSettings } from '../../../protocol/engines/sdcpp.js';

/**
 * stable-diffusion.cpp's server, as this engine reads it (examples/server/api.md upstream). Only
 * the fields the engine uses are checked; the rest are ignored, so newer servers still fit.
 */
export const Capabilities = z.object({
  model: z.object({ name: z.string(), stem: z.string(), path: z.string() }).partial().nullish(),
  defaults: z.object({
    width: z.number(),
    height: z.number(),
    sample_params: z.object({ sample_steps: z.number() }).partial(),
  }).partial().nullish(),
  limits: z.object({
    min_width: z.number(), max_width: z.number(), min_height: z.number(), max_height: z.number(), max_queue_size: z.number(),
  }).partial().nullish(),
  features: z.object({ cancel_queued: z.boolean(), cancel_generating: z.boolean() }).partial().nullish(),
});
export type Capabilities = z.infer<typeof Capabilities>;

/** `202` from `POST /sdcpp/v1/img_gen`. */
export const Submitted = z.object({ id: z.string().min(1), status: z.string().optional(), poll_url: z.string().optional() });

/** `GET /sdcpp/v1/jobs/{id}`; `progress_step`/`progress_steps` only on servers with upstream PR #1884. */
export const JobState = z.object({
  id: z.string(),
  status: z.string(),
  started: z.number().nullish(),
  queue_position: z.number().nullish(),
  progress_step: z.number().nullish(),
  progress_steps: z.number().nullish(),
  result: z.object({
    output_format: z.string().optional(),
    images: z.array(z.object({ index: z.number().optional(), b64_json: z.string() })),
  }).nullish(),
  error: z.object({ code: z.string().optional(), message: z.string().optional() }).nullish(),
});
export type JobState = z.infer<typeof JobState>;

/** `POST /sdapi/v1/txt2img` → base64 PNGs. */
export const Txt2ImgReply = z.object({ images: z.array(z.string()).min(1) });

/** `GET /metrics` with `Accept: application/json` (servers started with `--metrics`). */
export const Metrics = z.object({ model_memory: z.object({ total_bytes: z.number() }).partial().nullish() });

/** Sizes outside the server's advertised limits are refused here, with the limits in the message, before a request is spent. */
export function checkLimits(request: ImageRequest, capabilities: Capabilities | null, model: string): void {
  const limits = capabilities?.limits;
  if (!limits) return;
  const problems: string[] = [];
  const check = (side: 'width' | 'height', value: number, min?: number, max?: number): void => {
    if ((min !== undefined && value < min) || (max !== undefined && value > max)) {
      problems.push(`${side} ${value} is outside the server's ${min ?? '…'}–${max ?? '…'}`);
    }
  };
  check('width', request.width, limits.min_width, limits.max_width);
  check('height', request.height, limits.min_height, limits.max_height);
  if (problems.length) throw new EngineError('INVALID_INPUT', formatError('INVALID_INPUT', { model, detail: problems.join('; ') }), false);
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** `over` laid on `base`, nested objects merged key by key. */
function deepMerge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(over)) {
    const current = merged[key];
    merged[key] = isPlainObject(current) && isPlainObject(value) ? deepMerge(current, value) : value;
  }
  return merged;
}

/** The native `img_gen` body: the job's fields over the model's `extra`; always one PNG. */
export function nativeBody(request: ImageRequest, settings: SdcppSettings): Record<string, unknown> {
  return deepMerge(settings.extra, {
    prompt: request.prompt,
    negative_prompt: request.negativePrompt,
    width: request.width,
    height: request.height,
    seed: request.seed,
    batch_count: 1,
    sample_params: { sample_steps: request.steps },
    output_format: 'png',
  });
}

/** The A1111 `txt2img` body; native extras ride in the prompt as upstream's `<sd_cpp_extra_args>` block. */
export function sdapiBody(request: ImageRequest, settings: SdcppSettings): Record<string, unknown> {
  const extras = Object.keys(settings.extra).length ? `<sd_cpp_extra_args>${JSON.stringify(settings.extra)}</sd_cpp_extra_args>` : '';
  return {
    prompt: extras ? `${request.prompt} ${extras}` : request.prompt,
    negative_prompt: request.negativePrompt,
    width: request.width,
    height: request.height,
    steps: request.steps,
    seed: request.seed,
    batch_size: 1,
  };
}
