import type { z } from 'zod';
import { MeshError } from '../../protocol/index.js';

/** An input checked by its job type's schema: INVALID_INPUT naming each field that is wrong, and why. */
export function parseInput<T extends z.ZodType>(schema: T, input: unknown, model: string): z.output<T> {
  const parsed = schema.safeParse(input);
  if (!parsed.success) {
    const detail = parsed.error.issues.map((issue) => `${issue.path.join('.') || 'input'}: ${issue.message}`).join('; ');
    throw new MeshError('INVALID_INPUT', { model, detail });
  }
  return parsed.data;
}
