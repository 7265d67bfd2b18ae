/**
 * A tiny, deterministic ONNX graph builder over `onnx-proto`.
 *
 * The built-in models are written as code with this builder. Everything that
 * ends up in the file is a pure function of the calls made: there are no
 * timestamps, the producer is always "gpumesh", nodes / initializers / inputs /
 * outputs keep the order in which they were added, and tensor data is stored
 * as little-endian `raw_data`. The same calls therefore give the same bytes
 * (and the same SHA-256) on every machine.
 */
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';

// onnx-proto is a CommonJS module; its namespace object is the default export.
const { onnx } = onnxProto;

export const OPSET_VERSION = 17;
export const IR_VERSION = 8;
export const PRODUCER_NAME = 'gpumesh';

/** Element types the builder knows how to declare and store. */
export type ElemType = 'float32' | 'uint8' | 'int32' | 'int64';

/** A dimension: a fixed size, or a symbolic name such as `'batch'`. */
export type Dim = number | string;

const ELEM_TYPE_CODES: Record<ElemType, number> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  uint8: onnx.TensorProto.DataType.UINT8,
  int32: onnx.TensorProto.DataType.INT32,
  int64: onnx.TensorProto.DataType.INT64,
};

/** ONNX data-type code for an element type (e.g. for Cast's `to` attribute). */
export function elemTypeCode(type: ElemType): number {
  return ELEM_TYPE_CODES[type];
}

/** A typed attribute value. Build them with `int`, `float`, `ints`, `floats`, `str`. */
export type Attr =
  | { readonly kind: 'int'; readonly value: number }
  | { readonly kind: 'float'; readonly value: number }
  | { readonly kind: 'ints'; readonly value: readonly number[] }
  | { readonly kind: 'floats'; readonly value: readonly number[] }
  | { readonly kind: 'string'; readonly value: string };

export const int = (value: number): Attr => ({ kind: 'int', value });
export const float = (value: number): Attr => ({ kind: 'float', value });
export const ints = (value: readonly number[]): Attr => ({ kind: 'ints', value });
export const floats = (value: readonly number[]): Attr => ({ kind: 'floats', value });
export const str = (value: string): Attr => ({ kind: 'string', value });

function checkDims(name: string, dims: readonly number[], length: number): void {
  for (const d of dims) {
    if (!Number.isSafeInteger(d) || d < 0) throw new Error(`initializer ${name}: bad dim ${d}`);
  }
  const expected = dims.reduce((a, b) => a * b, 1);
  if (expected !== length) {
    throw new Error(`initializer ${name}: dims [${dims.join(', ')}] need ${expected} values, got ${length}`);
  }
}

function encodeAttr(name: string, attr: Attr): OnnxTypes.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  switch (attr.kind) {
    case 'int':
      if (!Number.isSafeInteger(attr.value)) throw new Error(`attribute ${name}: ${attr.value} is not an integer`);
      return { name, type: T.INT, i: attr.value };
    case 'float':
      return { name, type: T.FLOAT, f: attr.value };
    case 'ints':
      for (const v of attr.value) {
        if (!Number.isSafeInteger(v)) throw new Error(`attribute ${name}: ${v} is not an integer`);
      }
      return { name, type: T.INTS, ints: [...attr.value] };
    case 'floats':
      return { name, type: T.FLOATS, floats: [...attr.value] };
    case 'string':
      return { name, type: T.STRING, s: new TextEncoder().encode(attr.value) };
  }
}

function valueInfo(name: string, type: ElemType, dims: readonly Dim[]): OnnxTypes.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType: ELEM_TYPE_CODES[type],
        shape: {
          dim: dims.map((d) => {
            if (typeof d === 'string') return { dimParam: d };
            if (!Number.isSafeInteger(d) || d < 0) throw new Error(`value ${name}: bad dim ${d}`);
            return { dimValue: d };
          }),
        },
      },
    },
  };
}

// Its bare Errors are invariants: a mistake in the code that builds a built-in model (whose graphs are fixed), never input.
export class GraphBuilder {
  private readonly nodes: OnnxTypes.INodeProto[] = [];
  private readonly initializers: OnnxTypes.ITensorProto[] = [];
  private readonly inputs: OnnxTypes.IValueInfoProto[] = [];
  private readonly outputs: OnnxTypes.IValueInfoProto[] = [];
  /** Every tensor name defined so far (graph inputs, initializers, node outputs). */
  private readonly defined = new Set<string>();
  private readonly opCounts = new Map<string, number>();

  constructor(
    readonly graphName: string,
    readonly docString = '',
  ) {}

  private define(name: string): void {
    if (name === '') throw new Error('empty tensor name');
    if (this.defined.has(name)) throw new Error(`tensor ${name} is defined twice`);
    this.defined.add(name);
  }

  private uniqueName(op: string): string {
    const n = this.opCounts.get(op) ?? 0;
    this.opCounts.set(op, n + 1);
    return `${op.toLowerCase()}_${n}`;
  }

  /** Declares a graph input. */
  input(name: string, type: ElemType, dims: readonly Dim[]): string {
    this.define(name);
    this.inputs.push(valueInfo(name, type, dims));
    return name;
  }

  /** Declares a graph output; `name` must be produced by a node. */
  output(name: string, type: ElemType, dims: readonly Dim[]): string {
    if (!this.defined.has(name)) throw new Error(`output ${name} is never produced`);
    this.outputs.push(valueInfo(name, type, dims));
    return name;
  }

  /** Adds a float32 initializer (stored as little-endian raw_data). */
  floatInit(name: string, dims: readonly number[], data: Float32Array | readonly number[]): string {
    checkDims(name, dims, data.length);
    const raw = new Uint8Array(data.length * 4);
    const view = new DataView(raw.buffer);
    for (let i = 0; i < data.length; i++) view.setFloat32(i * 4, data[i] ?? 0, true);
    this.define(name);
    this.initializers.push({ name, dims: [...dims], dataType: ELEM_TYPE_CODES.float32, rawData: raw });
    return name;
  }

  /** Adds an int64 initializer (shapes, axes), stored as little-endian raw_data. */
  int64Init(name: string, dims: readonly number[], data: readonly number[]): string {
    checkDims(name, dims, data.length);
    const raw = new Uint8Array(data.length * 8);
    const view = new DataView(raw.buffer);
    data.forEach((v, i) => {
      if (!Number.isSafeInteger(v)) throw new Error(`initializer ${name}: ${v} is not an integer`);
      view.setBigInt64(i * 8, BigInt(v), true);
    });
    this.define(name);
    this.initializers.push({ name, dims: [...dims], dataType: ELEM_TYPE_CODES.int64, rawData: raw });
    return name;
  }

  /** Adds a node with explicit output names. */
  node(
    opType: string,
    inputs: readonly string[],
    outputs: readonly string[],
    attrs: Readonly<Record<string, Attr>> = {},
  ): readonly string[] {
    for (const i of inputs) {
      // '' is ONNX's "optional input left out".
      if (i !== '' && !this.defined.has(i)) throw new Error(`${opType}: input ${i} is not defined yet`);
    }
    for (const o of outputs) this.define(o);
    this.nodes.push({
      name: this.uniqueName(opType),
      opType,
      input: [...inputs],
      output: [...outputs],
      attribute: Object.entries(attrs).map(([k, v]) => encodeAttr(k, v)),
    });
    return outputs;
  }

  /**
   * Adds a single-output node and returns its output name. The output is named
   * `out` when given, otherwise after the op (`matmul_3`, ...).
   */
  op(opType: string, inputs: readonly string[], attrs: Readonly<Record<string, Attr>> = {}, out?: string): string {
    const name = out ?? this.uniqueName(`${opType}_out`);
    this.node(opType, inputs, [name], attrs);
    return name;
  }

  /** The ModelProto as a plain protobufjs message object. */
  toModel(): OnnxTypes.IModelProto {
    if (this.outputs.length === 0) throw new Error('graph has no outputs');
    return {
      irVersion: IR_VERSION,
      opsetImport: [{ domain: '', version: OPSET_VERSION }],
      producerName: PRODUCER_NAME,
      producerVersion: '',
      docString: this.docString,
      graph: {
        name: this.graphName,
        node: this.nodes,
        initializer: this.initializers,
        input: this.inputs,
        output: this.outputs,
      },
    };
  }

  /** Serialises the model. The result is a fresh, unshared Uint8Array. */
  toBytes(): Uint8Array {
    const encoded = onnx.ModelProto.encode(onnx.ModelProto.create(this.toModel())).finish();
    const bytes = new Uint8Array(encoded.byteLength);
    bytes.set(encoded);
    return bytes;
  }
}
