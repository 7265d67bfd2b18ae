import { controlMarkupIn, type EngineDescriptor } from '../../../protocol/engines/index.js';
import { formatError, ImageInput, type ModelManifest } from '../../../protocol/index.js';
import { EngineError } from '../../core/engine.js';

/** One gpumesh image job, resolved against the model's defaults. */
export interface ImageRequest {
  prompt: string;
  negativePrompt: string;
  width: number;
  height: number;
  steps: number;
  /** -1: the server draws one. */
  seed: number;
}

export interface RequestDefaults {
  width: number;
  height: number;
  steps: number;
}

/**
 * The job's input checked against gpumesh's image schema and the engine's control markup (the orchestrator did
 * too; an engine does not trust it).
 */
export function imageRequest(input: Record<string, unknown>, defaults: RequestDefaults, model: string, engine: EngineDescriptor): ImageRequest {
  const parsed = ImageInput.safeParse(input);
  const detail = parsed.success ? controlMarkupIn(parsed.data, engine)
    : parsed.error.issues.map((issue) => `${issue.path.join('.') || 'input'}: ${issue.message}`).join('; ');
  if (!parsed.success || detail) throw new EngineError('INVALID_INPUT', formatError('INVALID_INPUT', { model, detail }), false);
  const image = parsed.data;
  return {
    prompt: image.prompt,
    negativePrompt: image.negativePrompt ?? '',
    width: image.width ?? defaults.width,
    height: image.height ?? defaults.height,
    steps: image.steps ?? defaults.steps,
    seed: image.seed ?? -1,
  };
}

/** A positive integer from the manifest's `params` (`defaultSteps`, `defaultWidth`, …), if there is one. */
export function manifestParam(manifest: ModelManifest, key: string): number | undefined {
  const value = Number(manifest.params[key]);
  return Number.isInteger(value) && value > 0 ? value : undefined;
}
