import { z } from 'zod';
import { DATATYPES, MeshError } from '../../../protocol/index.js';

const Parameters = z.record(z.string(), z.unknown()).optional();
const InferInput = z.object({
  name: z.string().min(1).max(200),
  shape: z.array(z.int().min(0)).max(16),
  datatype: z.enum(DATATYPES),
  parameters: Parameters,
  data: z.unknown().optional(),
});
/** An OIP infer request's JSON (its inference header, with the binary extension). */
export const InferRequest = z.object({
  id: z.string().max(200).optional(),
  parameters: Parameters,
  inputs: z.array(InferInput).min(1).max(64),
  outputs: z.array(z.object({ name: z.string().min(1).max(200), parameters: Parameters })).max(64).optional(),
});
export type InferRequest = z.infer<typeof InferRequest>;

const DATATYPE_SET: ReadonlySet<unknown> = new Set(DATATYPES);
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const isName = (value: unknown): boolean => typeof value === 'string' && value.length >= 1 && value.length <= 200;
const isParameters = (value: unknown): boolean => value === undefined || isObject(value);

function isInput(value: unknown): boolean {
  if (!isObject(value) || !isName(value.name) || !DATATYPE_SET.has(value.datatype) || !isParameters(value.parameters)) return false;
  const shape = value.shape;
  if (!Array.isArray(shape) || shape.length > 16) return false;
  for (const size of shape) if (!Number.isSafeInteger(size) || (size as number) < 0) return false;
  return true;
}

function isOutput(value: unknown): boolean {
  return isObject(value) && isName(value.name) && isParameters(value.parameters);
}

/**
 * Whether a parsed header is plainly an InferRequest: every field the schema names has its type and bounds. Never
 * true for a value the schema refuses; a value it would take that this does not (none is known) only costs the
 * schema's pass.
 */
function isInferRequest(value: unknown): value is InferRequest {
  if (!isObject(value) || (value.id !== undefined && !(typeof value.id === 'string' && value.id.length <= 200)) || !isParameters(value.parameters)) return false;
  const { inputs, outputs } = value;
  if (!Array.isArray(inputs) || inputs.length < 1 || inputs.length > 64 || !inputs.every(isInput)) return false;
  return outputs === undefined || (Array.isArray(outputs) && outputs.length <= 64 && outputs.every(isOutput));
}

/**
 * An infer request's header as the schema reads it, else BAD_REQUEST with the schema's words. A well-formed request —
 * nearly every one — is taken as it was parsed, without the schema's pass (a copy of every object and array in it, a
 * few kilobytes of garbage on each request of the hot path); fields the schema does not name are left in it, and
 * nothing reads them.
 */
export function readInferRequest(header: unknown): InferRequest {
  if (isInferRequest(header)) return header;
  const parsed = InferRequest.safeParse(header);
  if (!parsed.success) {
    throw new MeshError('BAD_REQUEST', { detail: parsed.error.issues.map((issue) => `${issue.path.join('.') || 'request'}: ${issue.message}`).join('; ') });
  }
  return parsed.data;
}
