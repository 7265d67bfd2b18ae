import { z } from 'zod';

/**
 * Tensors as the Open Inference Protocol names them, the vocabulary every tensor model in gpumesh speaks: a model's
 * inputs and outputs (read from its ONNX file, or declared), a job's input tensors, an OIP request's.
 */
export const DATATYPES = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BYTES'] as const;
export type Datatype = (typeof DATATYPES)[number];

/** The datatypes a job's tensors may have in gpumesh (the ONNX engine runs them; BYTES where a model takes strings). */
export const JOB_DATATYPES: readonly Datatype[] = ['FP32', 'FP16', 'INT64', 'INT32', 'INT8', 'UINT8', 'BOOL', 'BYTES'];

/** One input or output of a model: its name, datatype, and shape (−1: a dimension of any size). */
export const TensorSpec = z.object({
  name: z.string().min(1).max(200),
  datatype: z.enum(DATATYPES),
  shape: z.array(z.int().min(-1)).max(16),
});
export type TensorSpec = z.infer<typeof TensorSpec>;

/** Elements of a shape (each −1 counted as what `batch` says, else as 1). */
export function elementsOf(shape: readonly number[]): number {
  return shape.reduce((product, dim) => product * Math.max(dim, 1), 1);
}

/** Bytes one element takes in the binary tensor format (BYTES: variable). */
export const DATATYPE_BYTES: Readonly<Record<Datatype, number | null>> = {
  BOOL: 1, UINT8: 1, UINT16: 2, UINT32: 4, UINT64: 8, INT8: 1, INT16: 2, INT32: 4, INT64: 8, FP16: 2, FP32: 4, FP64: 8, BYTES: null,
};

/**
 * Whether a model batches: every input's first dimension is variable (−1), so jobs stack along it. A model with a
 * fixed first dimension runs its jobs one by one.
 */
export function batchesAlongFirstDim(inputs: readonly TensorSpec[]): boolean {
  return inputs.length > 0 && inputs.every((input) => input.shape.length > 0 && input.shape[0] === -1);
}

/** The number an IEEE 754 half-precision value (its 16 bits) is: FP16 tensors travel as bits. */
export function halfToNumber(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (mantissa / 1024);
  if (exponent === 31) return mantissa ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + mantissa / 1024);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** A number's IEEE 754 half-precision bits (rounded toward zero; too small: a signed zero; too large: infinity). */
export function numberToHalf(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exponent = ((x >>> 23) & 0xff) - 127 + 15;
  const mantissa = x & 0x7fffff;
  if (exponent <= 0) return sign;
  if (exponent >= 31) return sign | 0x7c00 | (((x >>> 23) & 0xff) === 0xff && mantissa ? 0x200 : 0);
  return sign | (exponent << 10) | (mantissa >>> 13);
}
