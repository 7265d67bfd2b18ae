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
