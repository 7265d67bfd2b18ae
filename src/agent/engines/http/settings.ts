import { z } from 'zod';
import type { ModelManifest } from '../../../protocol/index.js';
import { EngineError } from '../engine.js';

const ms = (fallback: number) => z.int().min(1).default(fallback);

export const BackoffSettings = (initialMs: number, maxMs: number, factor: number) => z.object({
  initialMs: ms(initialMs),
  maxMs: ms(maxMs),
  factor: z.number().min(1).max(10).default(factor),
}).prefault({});

/**
 * Settings every HTTP engine understands (in the model manifest's `settings`). Keys an engine does
 * not know are left alone: a server launcher may keep its own (a command template) beside them.
 */
export const ServerSettings = {
  /** A server the person already runs (`http://host:port`); without it the engine asks its endpoint provider to start one. */
  url: z.url({ protocol: /^https?$/ }).optional(),
  /** Longest wait for one HTTP answer. A synchronous generation is one answer, so this is generous. Default 10 min. */
  requestTimeoutMs: ms(600_000),
  /** Longest a job may take once sent, when its own deadline is not sooner. Default 10 min. */
  jobTimeoutMs: ms(600_000),
  /** At load, how long to wait for the server to answer (it may still be loading its model). Default 2 min. */
  loadTimeoutMs: ms(120_000),
  /** Waits between retries while the server answers 429. Default 500 ms doubling to 5 s. */
  busyBackoff: BackoffSettings(500, 5000, 2),
};

/** A manifest's settings through an engine's schema; a bad field fails the load with a message naming it (not retryable: every host would fail the same way). */
export function parseSettings<T extends z.ZodType>(schema: T, manifest: ModelManifest, engine: string): z.output<T> {
  const parsed = schema.safeParse(manifest.settings ?? {});
  if (parsed.success) return parsed.data;
  const detail = parsed.error.issues.map((issue) => `settings.${issue.path.join('.') || '(root)'}: ${issue.message}`).join('; ');
  throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" has settings the ${engine} engine cannot use: ${detail}`, false);
}
