import type { z } from 'zod';
import type { ModelManifest } from '../../../protocol/index.js';
import { EngineError } from '../../core/engine.js';

/**
 * Validate a manifest's engine-specific `settings` with the engine's own schema.
 * A bad setting is the operator's to fix, not another replica's: the error is
 * not retryable and names the field.
 */
export function parseSettings<T extends z.ZodType>(schema: T, manifest: ModelManifest, engine: string): z.infer<T> {
  const parsed = schema.safeParse(manifest.settings ?? {});
  if (parsed.success) return parsed.data;
  const detail = parsed.error.issues
    .map((issue) => `settings${issue.path.map((key) => (typeof key === 'number' ? `[${key}]` : `.${String(key)}`)).join('')}: ${issue.message}`)
    .join('; ');
  throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" (${engine}): invalid settings: ${detail}`, false);
}
