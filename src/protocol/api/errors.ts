import { z } from 'zod';

/**
 * gpumesh's error envelope, as every route outside /v2 and /openai/v1 answers an error (MeshError.toJSON inside
 * `error`).
 */
export const ErrorEnvelope = z.object({
  error: z.object({
    code: z.string().describe('A code of the error registry (docs/errors.md), e.g. VALIDATION_FAILED'),
    message: z.string(),
    details: z.record(z.string(), z.union([z.number(), z.string()])).optional()
      .describe('What a client acts on besides the message, for some codes: UPLOAD_CONFLICT\'s `offset` to resume from'),
  }),
});
export type ErrorEnvelope = z.infer<typeof ErrorEnvelope>;
