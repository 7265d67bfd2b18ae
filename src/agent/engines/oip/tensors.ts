/**
 * Tensor data as the Open Inference Protocol carries it: JSON `data` (flat or
 * nested, row-major) or, with Triton's binary tensor data extension, raw
 * little-endian bytes after the JSON header.
 */

interface NumericType {
  bytes: number;
  read(view: DataView, offset: number): number;
  write(view: DataView, offset: number, value: number): void;
}

/** IEEE half precision → number. */
function halfToNumber(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 0x1f) return fraction ? Number.NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

const readOnly = (): never => {
  // The Errors of this module are caught by the OIP engine's request and reported as the server's protocol error (ServerError).
  throw new Error('encoding this datatype is not supported');
};

/** Every numeric datatype of the protocol (and Triton's BF16), little-endian. BYTES is not numeric. */
export const NUMERIC_TYPES: Record<string, NumericType> = {
  BOOL: { bytes: 1, read: (v, o) => v.getUint8(o) ? 1 : 0, write: (v, o, x) => v.setUint8(o, x ? 1 : 0) },
  UINT8: { bytes: 1, read: (v, o) => v.getUint8(o), write: (v, o, x) => v.setUint8(o, x) },
  UINT16: { bytes: 2, read: (v, o) => v.getUint16(o, true), write: (v, o, x) => v.setUint16(o, x, true) },
  UINT32: { bytes: 4, read: (v, o) => v.getUint32(o, true), write: (v, o, x) => v.setUint32(o, x, true) },
  UINT64: { bytes: 8, read: (v, o) => Number(v.getBigUint64(o, true)), write: (v, o, x) => v.setBigUint64(o, BigInt(Math.trunc(x)), true) },
  INT8: { bytes: 1, read: (v, o) => v.getInt8(o), write: (v, o, x) => v.setInt8(o, x) },
  INT16: { bytes: 2, read: (v, o) => v.getInt16(o, true), write: (v, o, x) => v.setInt16(o, x, true) },
  INT32: { bytes: 4, read: (v, o) => v.getInt32(o, true), write: (v, o, x) => v.setInt32(o, x, true) },
  INT64: { bytes: 8, read: (v, o) => Number(v.getBigInt64(o, true)), write: (v, o, x) => v.setBigInt64(o, BigInt(Math.trunc(x)), true) },
  FP16: { bytes: 2, read: (v, o) => halfToNumber(v.getUint16(o, true)), write: readOnly },
  BF16: { bytes: 2, read: (v, o) => new Float32Array(new Uint32Array([v.getUint16(o, true) << 16]).buffer)[0]!, write: readOnly },
  FP32: { bytes: 4, read: (v, o) => v.getFloat32(o, true), write: (v, o, x) => v.setFloat32(o, x, true) },
  FP64: { bytes: 8, read: (v, o) => v.getFloat64(o, true), write: (v, o, x) => v.setFloat64(o, x, true) },
};

export const isNumeric = (datatype: string): boolean => Object.hasOwn(NUMERIC_TYPES, datatype);

/** Values → little-endian, row-major bytes (the binary extension's layout). */
export function encodeTensor(datatype: string, values: ArrayLike<number>): Uint8Array<ArrayBuffer> {
  const type = NUMERIC_TYPES[datatype];
  if (!type) throw new Error(`datatype ${datatype} has no binary encoding here`);
  const bytes = new Uint8Array(values.length * type.bytes);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < values.length; i++) type.write(view, i * type.bytes, values[i]!);
  return bytes;
}

/** Little-endian bytes → values. */
export function decodeTensor(datatype: string, bytes: Uint8Array): number[] {
  const type = NUMERIC_TYPES[datatype];
  if (!type) throw new Error(`datatype ${datatype} is not numeric`);
  if (bytes.byteLength % type.bytes !== 0) throw new Error(`${bytes.byteLength} bytes is not a whole number of ${datatype} elements`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Array.from({ length: bytes.byteLength / type.bytes }, (_, i) => type.read(view, i * type.bytes));
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
