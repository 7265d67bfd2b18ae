import type { Checkpoint } from './checkpoints.js';
import type { GenerationRequest } from './requests.js';

/**
 * The shapes the door answers in, as A1111's API gives them (`modules/api/models.py` and the handlers of
 * `modules/api/api.py`): the lists its clients fill their menus from, its options, and a generation's `info`.
 */

/**
 * The options a caller reads (`GET /sdapi/v1/options`): A1111's names for what clients look at — the checkpoint above
 * all (SillyTavern and Open WebUI read `sd_model_checkpoint`; SillyTavern takes a `forge_preset` key for Forge, so
 * there is none) — with the values the mesh works by. Only the checkpoint can be changed (`POST`); the rest are what
 * they are whatever is posted.
 */
export function optionsOf(checkpoint: Checkpoint | null, livePreviews: number): Record<string, unknown> {
  return {
    sd_model_checkpoint: checkpoint?.title ?? null,
    sd_checkpoint_hash: checkpoint?.sha256 ?? null,
    sd_checkpoints_limit: 1,
    sd_vae: 'Automatic',
    CLIP_stop_at_last_layers: 1,
    samples_format: 'png',
    live_previews_enable: livePreviews > 0,
    show_progress_every_n_steps: -1,
    eta_noise_seed_delta: 0,
    token_merging_ratio: 0,
    add_model_name_to_info: true,
    add_model_hash_to_info: true,
  };
}

/**
 * Sampler names A1111 lists, so a client's saved choice stays valid. The mesh's engines run their own sampler: the
 * name is recorded in `info`, not passed on (an image job has no sampler field).
 */
const SAMPLERS: readonly [name: string, aliases: string[]][] = [
  ['DPM++ 2M', ['k_dpmpp_2m']], ['DPM++ SDE', ['k_dpmpp_sde']], ['DPM++ 2M SDE', ['k_dpmpp_2m_sde']], ['DPM++ 2M SDE Heun', ['k_dpmpp_2m_sde_heun']],
  ['DPM++ 2S a', ['k_dpmpp_2s_a']], ['DPM++ 3M SDE', ['k_dpmpp_3m_sde']], ['Euler a', ['k_euler_a', 'k_euler_ancestral']], ['Euler', ['k_euler']],
  ['LMS', ['k_lms']], ['Heun', ['k_heun']], ['DPM2', ['k_dpm_2']], ['DPM2 a', ['k_dpm_2_a']], ['DPM fast', ['k_dpm_fast']], ['DPM adaptive', ['k_dpm_ad']],
  ['Restart', ['restart']], ['DDIM', ['ddim']], ['PLMS', ['plms']], ['UniPC', ['unipc']], ['LCM', ['k_lcm']],
];

export const samplers = (): { name: string; aliases: string[]; options: Record<string, never> }[] =>
  SAMPLERS.map(([name, aliases]) => ({ name, aliases, options: {} }));

/** A1111's schedule types, for the same reason as the samplers. */
const SCHEDULERS: readonly [name: string, label: string][] = [
  ['automatic', 'Automatic'], ['uniform', 'Uniform'], ['karras', 'Karras'], ['exponential', 'Exponential'], ['polyexponential', 'Polyexponential'],
  ['sgm_uniform', 'SGM Uniform'], ['kl_optimal', 'KL Optimal'], ['align_your_steps', 'Align Your Steps'], ['simple', 'Simple'], ['normal', 'Normal'],
  ['ddim', 'DDIM'], ['beta', 'Beta'],
];

export const schedulers = (): { name: string; label: string; aliases: null; default_rho: number; need_inner_model: boolean }[] =>
  SCHEDULERS.map(([name, label]) => ({ name, label, aliases: null, default_rho: -1, need_inner_model: false }));

/** The mesh upscales nothing: only A1111's "None", which SillyTavern expects first in the list. */
export const upscalers = (): { name: string; model_name: null; model_path: null; model_url: null; scale: number }[] =>
  [{ name: 'None', model_name: null, model_path: null, model_url: null, scale: 4 }];

/** The few command-line flags clients look at: the API is on, there is no web UI at this address. */
export const cmdFlags = (): Record<string, unknown> => ({ api: true, nowebui: true, listen: true, api_auth: null, disable_safe_unpickle: false });

/** What the jobs of a generation were and made, for its `info`. */
export interface GenerationOutcome {
  request: GenerationRequest;
  checkpoint: Checkpoint;
  /** Every picture's seed, those interrupted too (A1111's all_seeds). */
  seeds: number[];
  /** The seeds of the pictures answered, in order. */
  keptSeeds: number[];
  width: number;
  height: number;
  steps: number;
  timestamp: string;
  jobIds: string[];
  version: string;
}

/** A1111's text of one picture's parameters (what it writes into its PNGs and `infotexts`). */
function infotext(outcome: GenerationOutcome, seed: number): string {
  const { request } = outcome;
  const params: [string, unknown][] = [
    ['Steps', outcome.steps], ['Sampler', request.samplerName], ['Schedule type', request.scheduler], ['CFG scale', request.cfgScale], ['Seed', seed],
    ['Size', `${outcome.width}x${outcome.height}`], ['Model hash', outcome.checkpoint.hash], ['Model', outcome.checkpoint.model_name],
    ['Denoising strength', request.kind === 'img2img' ? request.strength : null], ...Object.entries(request.notes), ['Version', `gpumesh ${outcome.version}`],
  ];
  const text = params.filter(([, value]) => value !== null && value !== undefined).map(([key, value]) => `${key}: ${typeof value === 'string' && /[,:\n]/.test(value) ? JSON.stringify(value) : String(value)}`).join(', ');
  return `${request.prompt}${request.negativePrompt ? `\nNegative prompt: ${request.negativePrompt}` : ''}\n${text}`;
}

/**
 * A generation's `info`: a JSON string, as A1111's `Processed.js()` writes it — the seed and every seed, prompts, size,
 * steps, sampler, the model — plus `job_ids`, the mesh's jobs that made the pictures (in the gallery and `/v1/jobs`).
 * `steps` and `width`/`height` are what was made; what the mesh did otherwise than asked is in
 * `extra_generation_params` (a step count above the mesh's most).
 */
export function infoOf(outcome: GenerationOutcome): string {
  const { request } = outcome;
  const count = outcome.seeds.length;
  return JSON.stringify({
    prompt: request.prompt,
    all_prompts: Array<string>(count).fill(request.prompt),
    negative_prompt: request.negativePrompt,
    all_negative_prompts: Array<string>(count).fill(request.negativePrompt),
    seed: outcome.seeds[0] ?? -1,
    all_seeds: outcome.seeds,
    subseed: -1,
    all_subseeds: Array<number>(count).fill(-1),
    subseed_strength: 0,
    width: outcome.width,
    height: outcome.height,
    sampler_name: request.samplerName,
    cfg_scale: request.cfgScale,
    steps: outcome.steps,
    batch_size: request.batchSize,
    restore_faces: false,
    face_restoration_model: null,
    sd_model_name: outcome.checkpoint.model_name,
    sd_model_hash: outcome.checkpoint.hash,
    sd_vae_name: null,
    sd_vae_hash: null,
    seed_resize_from_w: -1,
    seed_resize_from_h: -1,
    denoising_strength: request.kind === 'img2img' ? request.strength ?? null : null,
    extra_generation_params: request.notes,
    index_of_first_image: 0,
    infotexts: outcome.keptSeeds.map((seed) => infotext(outcome, seed)),
    styles: [],
    job_timestamp: outcome.timestamp,
    clip_skip: 1,
    is_using_inpainting_conditioning: false,
    version: `gpumesh ${outcome.version}`,
    job_ids: outcome.jobIds,
  });
}
