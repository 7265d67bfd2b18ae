import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { MeshError, type Datatype, type TensorSpec } from '../../protocol/index.js';
import type { ExternalDataReference } from '../../protocol/engines/onnx-external-data.js';

// onnx-proto is a CommonJS module; its namespace object is the default export.
const { onnx } = onnxProto;
const TYPES = onnx.TensorProto.DataType;

/** ONNX element types and the OIP datatypes they are. */
const DATATYPE_OF: Readonly<Record<number, Datatype>> = {
  [TYPES.FLOAT]: 'FP32', [TYPES.UINT8]: 'UINT8', [TYPES.INT8]: 'INT8', [TYPES.UINT16]: 'UINT16', [TYPES.INT16]: 'INT16',
  [TYPES.INT32]: 'INT32', [TYPES.INT64]: 'INT64', [TYPES.STRING]: 'BYTES', [TYPES.BOOL]: 'BOOL', [TYPES.FLOAT16]: 'FP16',
  [TYPES.DOUBLE]: 'FP64', [TYPES.UINT32]: 'UINT32', [TYPES.UINT64]: 'UINT64',
};

/** Reads `[start, end)` of a stored file (BlobStore.read with a range); null when it is not stored. */
export type ReadRange = (start: number, end: number) => Promise<Buffer | null>;

/** What `models add` needs of an ONNX file: its graph's inputs and outputs, and every tensor it keeps elsewhere. */
export interface OnnxFileFacts {
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  external: ExternalDataReference[];
}

/** How much of the file is read at a time: the walk's memory, whatever the file's size. */
const WINDOW = 1024 * 1024;
/** The largest small message read whole (a graph input's description, a tensor's name, an external data entry). */
const SMALL_MESSAGE = 1024 * 1024;
const VARINT = 0;
const FIXED64 = 1;
const LENGTH_DELIMITED = 2;
const FIXED32 = 5;

type Message = 'model' | 'graph' | 'subgraph' | 'function' | 'node' | 'attribute' | 'sparse' | 'tensor' | 'initializer';

/**
 * The fields each message is walked into (field number → message), as in protocol/engines/onnx-external-data.ts, plus
 * the main graph's inputs and outputs and its initializers' names, which make the signature. Subgraphs (the branches
 * of If, Loop, Scan) count for external data only.
 */
const CHILDREN: Readonly<Record<Message, Readonly<Record<number, Message>>>> = {
  model: { 7: 'graph', 25: 'function' },
  graph: { 1: 'node', 5: 'initializer', 15: 'sparse' },
  subgraph: { 1: 'node', 5: 'tensor', 15: 'sparse' },
  function: { 7: 'node', 11: 'attribute' },
  node: { 5: 'attribute' },
  attribute: { 5: 'tensor', 6: 'subgraph', 10: 'tensor', 11: 'subgraph', 22: 'sparse', 23: 'sparse' },
  sparse: { 1: 'tensor', 2: 'tensor' },
  tensor: {},
  initializer: {},
};

/**
 * Read an ONNX file as stored, a window at a time, never whole: field headers are walked and the weights between them
 * skipped, so a model of gigabytes (a resumable upload may be) costs a megabyte of memory to check, where decoding it
 * whole would hold it twice — or fail outright past Node's largest buffer. A file that is not an ONNX model, or
 * declares a type gpumesh cannot carry, is INVALID_INPUT naming what is wrong.
 */
export async function inspectOnnxFile(read: ReadRange, size: number, model: string): Promise<OnnxFileFacts> {
  const source = new RangeSource(read, size);
  const notOnnx = (detail: string): MeshError => new MeshError('INVALID_INPUT', { model, detail: `the file is not an ONNX model (${detail})` });
  const values: { role: 'input' | 'output'; bytes: Uint8Array }[] = [];
  const weights = new Set<string>();
  const external: ExternalDataReference[] = [];
  let graphs = 0;
  const pending: { message: Message; start: number; end: number }[] = [{ message: 'model', start: 0, end: size }];
  try {
    while (pending.length > 0) {
      const { message, start, end } = pending.pop()!;
      if (message === 'graph') graphs++;
      const tensor = message === 'tensor' || message === 'initializer' ? { name: '', locations: [] as string[] } : null;
      let at = start;
      while (at < end) {
        const [tag, afterTag] = await source.varint(at);
        const field = tag >>> 3;
        const wire = tag & 7;
        if (wire === VARINT) {
          at = (await source.varint(afterTag))[1];
          continue;
        }
        if (wire === FIXED64 || wire === FIXED32) {
          at = afterTag + (wire === FIXED64 ? 8 : 4);
          continue;
        }
        if (wire !== LENGTH_DELIMITED) throw new Error(`wire type ${wire} at byte ${at}`);
        const [length, body] = await source.varint(afterTag);
        at = body + length;
        if (at > end) throw new Error(`a field runs past its message (${at} > ${end})`);
        if (tensor) {
          if (field === 8) tensor.name = Buffer.from(await source.bytes(body, length)).toString('utf8');
          else if (field === 13) {
            const location = locationOf(await source.bytes(body, length));
            if (location !== null) tensor.locations.push(location);
          }
          continue;
        }
        if (message === 'graph' && (field === 11 || field === 12)) {
          values.push({ role: field === 11 ? 'input' : 'output', bytes: await source.bytes(body, length) });
          continue;
        }
        const child = CHILDREN[message][field];
        if (child) pending.push({ message: child, start: body, end: at });
      }
      if (tensor) {
        if (message === 'initializer') weights.add(tensor.name);
        for (const location of tensor.locations) external.push({ tensor: tensor.name || '(unnamed)', location });
      }
    }
  } catch (error) {
    if (error instanceof MeshError) throw error;
    throw notOnnx((error as Error).message.slice(0, 120));
  }
  if (graphs === 0 || !values.some((value) => value.role === 'output')) {
    throw new MeshError('INVALID_INPUT', { model, detail: 'the file is not an ONNX model: it has no graph with outputs' });
  }
  const specs = values.map(({ role, bytes }) => ({ role, spec: tensorSpecOf(onnx.ValueInfoProto.decode(bytes), role, model) }));
  return {
    inputs: specs.filter(({ role, spec }) => role === 'input' && !weights.has(spec.name)).map(({ spec }) => spec),
    outputs: specs.filter(({ role }) => role === 'output').map(({ spec }) => spec),
    external,
  };
}

/** A graph input's or output's name, datatype and shape (a symbolic or missing dimension is −1). */
function tensorSpecOf(value: OnnxTypes.IValueInfoProto, role: string, model: string): TensorSpec {
  const tensor = value.type?.tensorType;
  const datatype = tensor?.elemType == null ? undefined : DATATYPE_OF[tensor.elemType];
  if (!datatype) throw new MeshError('INVALID_INPUT', { model, detail: `${role} ${value.name ?? '?'} is not a tensor of a type gpumesh carries` });
  const shape = (tensor!.shape?.dim ?? []).map((dim: OnnxTypes.TensorShapeProto.IDimension) => (dim.dimValue != null && Number(dim.dimValue) > 0 ? Number(dim.dimValue) : -1));
  return { name: value.name ?? '', datatype, shape };
}

/** The value of a `location` entry (StringStringEntryProto: key 1, value 2), or null for another key. */
function locationOf(entry: Uint8Array): string | null {
  const decoded = onnx.StringStringEntryProto.decode(entry);
  return decoded.key === 'location' ? decoded.value : null;
}

/** A stored file read through a window that moves forward (and back, for a branch the walk comes to later). */
class RangeSource {
  readonly #read: ReadRange;
  readonly #size: number;
  #window: Buffer = Buffer.alloc(0);
  #windowStart = 0;

  constructor(read: ReadRange, size: number) {
    this.#read = read;
    this.#size = size;
  }

  /** A protobuf varint at `at`: its value and the position after it. */
  async varint(at: number): Promise<[number, number]> {
    await this.#cover(at, Math.min(10, this.#size - at));
    let value = 0;
    let shift = 0;
    for (let position = at; position < this.#size; position++) {
      const byte = this.#window[position - this.#windowStart]!;
      // Lengths and tags past 2^53 are not ONNX files; plain arithmetic keeps the low bits exact up to there.
      value += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return [value, position + 1];
      shift += 7;
      if (shift > 63) break;
    }
    throw new Error(`a malformed varint at byte ${at}`);
  }

  /** `length` bytes at `at`, copied out: only ever a small message (a name, an input's description). */
  async bytes(at: number, length: number): Promise<Uint8Array> {
    if (length > SMALL_MESSAGE) throw new Error(`a ${length}-byte field where a small one belongs, at byte ${at}`);
    await this.#cover(at, length);
    return Uint8Array.prototype.slice.call(this.#window, at - this.#windowStart, at - this.#windowStart + length);
  }

  async #cover(at: number, length: number): Promise<void> {
    if (at < 0 || length < 0 || at + length > this.#size) throw new Error(`the file ends before byte ${at + length}`);
    if (at >= this.#windowStart && at + length <= this.#windowStart + this.#window.length) return;
    const end = Math.min(this.#size, at + Math.max(WINDOW, length));
    const bytes = await this.#read(at, end);
    if (!bytes || bytes.length !== end - at) throw new Error(`the stored file could not be read at bytes ${at}–${end}`);
    this.#window = bytes;
    this.#windowStart = at;
  }
}
