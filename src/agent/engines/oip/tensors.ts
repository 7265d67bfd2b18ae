import { isWireDatatype, tensorFromBytes, tensorToBytes, type WireDatatype } from '../../../protocol/index.js';

/**
 * Tensor data as the Open Inference Protocol carries it: JSON `data` (flat or nested, row-major) or, with Triton's
 * binary tensor data extension, raw little-endian bytes after the JSON header (protocol's tensor-bytes.ts, the codec
 * the OIP front door shares). Errors here are caught by the OIP engine's request and reported as the server's
 * protocol error (ServerError).
 */

/** A datatype whose elements are numbers (BOOL as 0 and 1): every one of the wire's but BYTES. */
export const isNumeric = (datatype: string): datatype is WireDatatype => isWireDatatype(datatype) && datatype !== 'BYTES';

/** Values → little-endian, row-major bytes (the binary extension's layout). */
export function encodeTensor(datatype: string, values: ArrayLike<number>): Uint8Array<ArrayBuffer> {
  if (!isNumeric(datatype)) throw new Error(`datatype ${datatype} has no numeric binary encoding`);
  const bytes = tensorToBytes(values, datatype);
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) as Uint8Array<ArrayBuffer>;
}

/** Little-endian bytes → values (a BOOL's as 0 and 1). */
export function decodeTensor(datatype: string, bytes: Uint8Array): number[] {
  if (!isNumeric(datatype)) throw new Error(`datatype ${datatype} is not numeric`);
  return tensorFromBytes(bytes, datatype).map(Number);
}

/** JSON tensor `data`, flat or nested, → flat numbers (booleans as 0/1). */
export function flattenData(data: unknown): number[] {
  const out: number[] = [];
  const walk = (value: unknown): void => {
    if (Array.isArray(value)) for (const item of value) walk(item);
    else if (typeof value === 'number') out.push(value);
    else if (typeof value === 'boolean') out.push(value ? 1 : 0);
    else throw new Error(`tensor data holds a ${typeof value}, not a number`);
  };
  walk(data);
  return out;
}

/** Elements in a tensor of this shape. */
export const elementCount = (shape: readonly number[]): number => shape.reduce((product, dim) => product * dim, 1);
