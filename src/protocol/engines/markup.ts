import type { ControlMarkup } from './descriptor.js';

/**
 * sd.cpp's server reads two kinds of markup in a prompt, whichever of its APIs receives it (native, A1111 or
 * OpenAI-style): an `<sd_cpp_extra_args>{json}</sd_cpp_extra_args>` block, whose JSON it lays over the request —
 * size, steps, seed, batch count, so a client escapes every limit the orchestrator checked — and LoRA tags
 * `<lora:name:weight>`, which load a file from the server's LoRA folder. Matched loosely (any case, spaces inside
 * the brackets) so a variant the server might accept is refused too.
 */
export const SDCPP_MARKUP: readonly ControlMarkup[] = [
  { name: '<sd_cpp_extra_args>', pattern: /<\s*\/?\s*sd_cpp_extra_args\s*>/i, effect: 'sd-server lays its JSON over the validated request' },
  { name: 'a <lora:…> tag', pattern: /<\s*lora\s*:/i, effect: 'sd.cpp loads the named LoRA file' },
];

/**
 * ComfyUI's text encoders read `embedding:<name>` in a prompt as "load this file from the embeddings folder". A
 * workflow's own text may use it; a client's may not.
 */
export const COMFYUI_MARKUP: readonly ControlMarkup[] = [
  { name: 'embedding:<name>', pattern: /embedding\s*:/i, effect: 'ComfyUI loads the named embedding file' },
];
