import { DATATYPE_BYTES, halfToNumber, MeshError, numberToHalf, type Datatype } from '../../../protocol/index.js';
import { assertJsonDepth } from '../json-depth.js';

/**
 * Triton's binary tensor data extension (its docs/protocol/extension_binary_data.md), which KServe's clients send:
 * a JSON inference header of `Inference-Header-Content-Length` bytes, then each input flagged with
 * `parameters.binary_data_size` as raw bytes, in the order of the header's inputs — little-endian, row-major; a BYTES
 * element as a 4-byte little-endian length and its bytes.
 */

/** Elements of a binary tensor as JSON numbers, booleans or strings. */
export function decodeTensor(bytes: Uint8Array, datatype: Datatype, name: string): (number | boolean | string)[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = DATATYPE_BYTES[datatype];
  if (size === null) {
    const values: string[] = [];
    for (let offset = 0; offset < bytes.length;) {
      if (offset + 4 > bytes.length) throw bad(name, 'a BYTES element is cut off in its length');
      const length = view.getUint32(offset, true);
      offset += 4;
      if (offset + length > bytes.length) throw bad(name, 'a BYTES element is longer than what was sent');
      values.push(Buffer.from(bytes.buffer, bytes.byteOffset + offset, length).toString('utf8'));
      offset += length;
    }
    return values;
  }
  if (bytes.length % size !== 0) throw bad(name, `${bytes.length} bytes is not a whole number of ${datatype} elements (${size} bytes each)`);
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
      case 'FP32': values[index] = view.getFloat32(at, true); break;
      case 'FP64': values[index] = view.getFloat64(at, true); break;
    }
  }
  return values;
}

/** The raw bytes of a tensor's elements. */
export function encodeTensor(data: readonly (number | boolean | string)[], datatype: Datatype): Buffer {
  const size = DATATYPE_BYTES[datatype];
  if (size === null) {
    const parts = (data as string[]).map((value) => Buffer.from(String(value), 'utf8'));
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
  for (const [index, raw] of data.entries()) {
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
      case 'UINT64': out.writeBigUInt64LE(BigInt(value), at); break;
      case 'INT64': out.writeBigInt64LE(BigInt(value), at); break;
      case 'FP16': out.writeUInt16LE(numberToHalf(value), at); break;
      case 'FP32': out.writeFloatLE(value, at); break;
      case 'FP64': out.writeDoubleLE(value, at); break;
    }
  }
  return out;
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
