import { MeshError, TensorBytesError, tensorFromBytes, type Datatype } from '../../../protocol/index.js';
import { assertJsonDepth } from '../json-depth.js';

/**
 * Triton's binary tensor data extension (its docs/protocol/extension_binary_data.md), which KServe's clients send:
 * a JSON inference header of `Inference-Header-Content-Length` bytes, then each input flagged with
 * `parameters.binary_data_size` as raw bytes, in the order of the header's inputs (the bytes' layout: protocol's
 * tensor-bytes.ts, shared with the OIP engine adapter).
 */

/** A client's binary input as JSON numbers, booleans or strings; bytes that are no such tensor are its 400, naming it. */
export function decodeTensor(bytes: Uint8Array, datatype: Datatype, name: string): (number | boolean | string)[] {
  try {
    return tensorFromBytes(bytes, datatype);
  } catch (error) {
    if (error instanceof TensorBytesError) throw bad(name, error.message);
    throw error;
  }
}

/** A request body split in its JSON header and the binary data after it. */
export function splitBody(body: Buffer, headerLength: number | null): { header: unknown; binary: Buffer } {
  const length = headerLength ?? body.length;
  if (!Number.isSafeInteger(length) || length < 0 || length > body.length) {
    throw new MeshError('BAD_REQUEST', { detail: `Inference-Header-Content-Length ${headerLength} is not within the body's ${body.length} bytes` });
  }
  let header: unknown;
  try {
    header = JSON.parse(body.subarray(0, length).toString('utf8'));
  } catch (error) {
    throw new MeshError('BAD_REQUEST', { detail: `the inference header is not JSON (${(error as Error).message.slice(0, 100)})` });
  }
  // Its own parser, so its own depth check: before zod or the tensors walk it.
  assertJsonDepth(header, 'inference header');
  return { header, binary: body.subarray(length) };
}

const bad = (name: string, detail: string): MeshError => new MeshError('BAD_REQUEST', { detail: `input ${name}: ${detail}` });
