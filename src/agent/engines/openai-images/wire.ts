import { z } from 'zod';
import type { ImageRequest } from '../kit/image-input.js';
import type { OpenAiImagesSettings } from '../../../protocol/engines/openai-images.js';

/** `POST /v1/images/generations` → `{created, data: [{b64_json} | {url}, revised_prompt?]}`. */
export const GenerationsReply = z.object({
  data: z.array(z.object({ b64_json: z.string().optional(), url: z.string().optional() })).min(1),
});

/** The request for one job: one image of the job's size. */
export function generationsBody(request: ImageRequest, settings: OpenAiImagesSettings): Record<string, unknown> {
  let prompt = request.prompt;
  if (settings.promptExtras === 'sdcpp') {
    const native = {
      seed: request.seed,
      sample_params: { sample_steps: request.steps },
      ...(request.negativePrompt ? { negative_prompt: request.negativePrompt } : {}),
    };
    prompt = `${prompt} <sd_cpp_extra_args>${JSON.stringify(native)}</sd_cpp_extra_args>`;
  }
  return {
    ...settings.extra,
    ...(settings.model ? { model: settings.model } : {}),
    prompt,
    n: 1,
    size: `${request.width}x${request.height}`,
    ...(settings.sendResponseFormat ? { response_format: 'b64_json' } : {}),
  };
}
