import { DATATYPE_BYTES, halfToNumber, numberToHalf, type Datatype } from './tensors.js';

/**
 * Triton's binary tensor data extension (its docs/protocol/extension_binary_data.md): a tensor's elements as raw
 * bytes, little-endian and row-major; a BYTES element as a 4-byte little-endian length and its bytes. One codec for
 * both places gpumesh speaks it: the OIP front door (clients' inputs in, outputs out) and the OIP engine adapter (a
 * server's outputs in, inputs out). BF16, which Triton sends for bfloat16 models, is a datatype of the wire only.
 */
export type WireDatatype = Datatype | 'BF16';

/** Bytes that are not a whole tensor of the datatype they claim; the message says why, the caller names the tensor. */
export class TensorBytesError extends Error {}

/** Bytes one element takes (null: BYTES, length-prefixed); undefined for a name that is no datatype of the wire. */
const elementBytes = (datatype: string): number | null | undefined => (datatype === 'BF16' ? 2 : DATATYPE_BYTES[datatype as Datatype]);

export const isWireDatatype = (datatype: string): datatype is WireDatatype => elementBytes(datatype) !== undefined;

// BF16 is the top half of an FP32's bits: read and written through one shared float.
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** A tensor's elements from its bytes: numbers, booleans (BOOL) or strings (BYTES). */
export function tensorFromBytes(bytes: Uint8Array, datatype: WireDatatype): (number | boolean | string)[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = elementBytes(datatype);
  if (size === undefined) throw new TensorBytesError(`${datatype} is not a datatype of the binary tensor format`);
  if (size === null) {
    const values: string[] = [];
    for (let offset = 0; offset < bytes.length;) {
      if (offset + 4 > bytes.length) throw new TensorBytesError('a BYTES element is cut off in its length');
      const length = view.getUint32(offset, true);
      offset += 4;
      if (offset + length > bytes.length) throw new TensorBytesError('a BYTES element is longer than what was sent');
      values.push(Buffer.from(bytes.buffer, bytes.byteOffset + offset, length).toString('utf8'));
      offset += length;
    }
    return values;
  }
  if (bytes.length % size !== 0) throw new TensorBytesError(`${bytes.length} bytes is not a whole number of ${datatype} elements (${size} bytes each)`);
  const count = bytes.length / size;
  const values = new Array<number | boolean>(count);
  for (let index = 0; index < count; index++) {
    const at = index * size;
    switch (datatype) {
      case 'BOOL': values[index] = view.getUint8(at) !== 0; break;
      case 'UINT8': values[index] = view.getUint8(at); break;
      case 'INT8': values[index] = view.getInt8(at); break;
      case 'UINT16': values[index] = view.getUint16(at, true); break;
      case 'INT16': values[index] = view.getInt16(at, true); break;
      case 'UINT32': values[index] = view.getUint32(at, true); break;
      case 'INT32': values[index] = view.getInt32(at, true); break;
      case 'UINT64': values[index] = Number(view.getBigUint64(at, true)); break;
      case 'INT64': values[index] = Number(view.getBigInt64(at, true)); break;
      case 'FP16': values[index] = halfToNumber(view.getUint16(at, true)); break;
      case 'BF16': u32[0] = view.getUint16(at, true) << 16; values[index] = f32[0]!; break;
      case 'FP32': values[index] = view.getFloat32(at, true); break;
      case 'FP64': values[index] = view.getFloat64(at, true); break;
    }
  }
  return values;
}

/** A tensor's bytes from its elements (a BOOL's truthiness; any other numeric datatype's Number value). */
export function tensorToBytes(data: ArrayLike<number | boolean | string>, datatype: WireDatatype): Buffer {
  const size = elementBytes(datatype);
  if (size === undefined) throw new TensorBytesError(`${datatype} is not a datatype of the binary tensor format`);
  if (size === null) {
    const parts = Array.from(data, (value) => Buffer.from(String(value), 'utf8'));
    const out = Buffer.alloc(parts.reduce((sum, part) => sum + 4 + part.length, 0));
    let offset = 0;
    for (const part of parts) {
      out.writeUInt32LE(part.length, offset);
      part.copy(out, offset + 4);
      offset += 4 + part.length;
    }
    return out;
  }
  const out = Buffer.alloc(data.length * size);
  for (let index = 0; index < data.length; index++) {
    const raw = data[index]!;
    const value = Number(raw);
    const at = index * size;
    switch (datatype) {
      case 'BOOL': out.writeUInt8(raw ? 1 : 0, at); break;
      case 'UINT8': out.writeUInt8(value, at); break;
      case 'INT8': out.writeInt8(value, at); break;
      case 'UINT16': out.writeUInt16LE(value, at); break;
      case 'INT16': out.writeInt16LE(value, at); break;
      case 'UINT32': out.writeUInt32LE(value, at); break;
      case 'INT32': out.writeInt32LE(value, at); break;
      case 'UINT64': out.writeBigUInt64LE(BigInt(Math.trunc(value)), at); break;
      case 'INT64': out.writeBigInt64LE(BigInt(Math.trunc(value)), at); break;
      case 'FP16': out.writeUInt16LE(numberToHalf(value), at); break;
      case 'BF16': f32[0] = value; out.writeUInt16LE(u32[0]! >>> 16, at); break;
      case 'FP32': out.writeFloatLE(value, at); break;
      case 'FP64': out.writeDoubleLE(value, at); break;
    }
  }
  return out;
}
