import protobuf from 'protobufjs/minimal.js';

/**
 * ONNX keeps a large tensor's bytes outside the model file when the tensor says so (`data_location: EXTERNAL`, with
 * `external_data: [{key: "location", value: "weights.bin"}, …]`), and onnxruntime then opens that file by itself —
 * relative to the model's folder, or, for a model handed over as bytes, relative to the process's working directory.
 * A model file is data a client may add, so what it makes onnxruntime open is checked on both sides: the orchestrator
 * refuses a model whose external data names anything but a file of the model's own file set, and the agent checks
 * again before it builds a session (a model that reached it another way).
 */
export interface ExternalDataReference {
  /** The tensor (an initializer, an attribute's tensor, a sparse tensor's values or indices), by name. */
  tensor: string;
  /** Where it says its bytes are, as written in the file. */
  location: string;
}

/** The messages the walk descends into, and the fields of each that hold the next ones (field number → message). */
type Message = 'model' | 'graph' | 'function' | 'node' | 'attribute' | 'sparse' | 'tensor' | 'entry';
const CHILDREN: Readonly<Record<Message, Readonly<Record<number, Message>>>> = {
  // ModelProto: graph 7, functions 25.
  model: { 7: 'graph', 25: 'function' },
  // GraphProto: node 1, initializer 5, sparse_initializer 15.
  graph: { 1: 'node', 5: 'tensor', 15: 'sparse' },
  // FunctionProto: node 7, attribute_proto 11 (an attribute's default).
  function: { 7: 'node', 11: 'attribute' },
  // NodeProto: attribute 5.
  node: { 5: 'attribute' },
  // AttributeProto: t 5, g 6, tensors 10, graphs 11, sparse_tensor 22, sparse_tensors 23.
  attribute: { 5: 'tensor', 6: 'graph', 10: 'tensor', 11: 'graph', 22: 'sparse', 23: 'sparse' },
  // SparseTensorProto: values 1, indices 2.
  sparse: { 1: 'tensor', 2: 'tensor' },
  // TensorProto: external_data 13 (StringStringEntryProto); its name (8) is read where it is.
  tensor: { 13: 'entry' },
  entry: {},
};
const LENGTH_DELIMITED = 2;

/**
 * Every tensor of an ONNX model file that keeps its bytes elsewhere, with the location it names — in the main graph,
 * the graphs of control-flow nodes (If, Loop, Scan) at any depth, functions, and node attributes. Only the fields on
 * the way are read: weights are skipped, not decoded, so a model of gigabytes costs a pass over its field headers. A
 * tensor counts if it names a location at all, whatever its `data_location` says. Throws on bytes that are not a
 * protobuf message (the caller says the file is not an ONNX model).
 */
export function externalDataReferences(bytes: Uint8Array): ExternalDataReference[] {
  const reader = protobuf.Reader.create(bytes);
  const found: ExternalDataReference[] = [];
  // A stack, not recursion: a crafted file may nest graphs as deep as its bytes allow.
  const pending: { message: Message; start: number; end: number; tensor?: { name: string; locations: string[] } }[] = [
    { message: 'model', start: 0, end: bytes.length },
  ];
  while (pending.length > 0) {
    const { message, start, end } = pending.pop()!;
    reader.pos = start;
    if (message === 'tensor') {
      const tensor = { name: '', locations: [] as string[] };
      const entries: { start: number; end: number }[] = [];
      while (reader.pos < end) {
        const tag = reader.uint32();
        const field = tag >>> 3;
        if (field === 8 && (tag & 7) === LENGTH_DELIMITED) tensor.name = reader.string();
        else if (field === 13 && (tag & 7) === LENGTH_DELIMITED) {
          const length = reader.uint32();
          entries.push({ start: reader.pos, end: reader.pos + length });
          reader.skip(length);
        } else reader.skipType(tag & 7);
      }
      for (const entry of entries) {
        const location = locationOf(reader, entry.start, entry.end);
        if (location !== null) found.push({ tensor: tensor.name || '(unnamed)', location });
      }
      continue;
    }
    const children = CHILDREN[message];
    while (reader.pos < end) {
      const tag = reader.uint32();
      const child = children[tag >>> 3];
      if (child && (tag & 7) === LENGTH_DELIMITED) {
        const length = reader.uint32();
        if (reader.pos + length > end) throw new Error(`a field runs past its message (${reader.pos + length} > ${end})`);
        pending.push({ message: child, start: reader.pos, end: reader.pos + length });
        reader.skip(length);
      } else reader.skipType(tag & 7);
    }
  }
  return found;
}

/** The value of a `location` entry (StringStringEntryProto: key 1, value 2), or null for another key. */
function locationOf(reader: protobuf.Reader, start: number, end: number): string | null {
  reader.pos = start;
  let key = '';
  let value = '';
  while (reader.pos < end) {
    const tag = reader.uint32();
    if ((tag & 7) !== LENGTH_DELIMITED) reader.skipType(tag & 7);
    else if (tag >>> 3 === 1) key = reader.string();
    else if (tag >>> 3 === 2) value = reader.string();
    else reader.skipType(tag & 7);
  }
  return key === 'location' ? value : null;
}

/**
 * Why a model's external data may not be used, or null when every reference names a file of its own file set:
 * exactly a member's name (members are plain names, so no folder, `..` or absolute path can match), and not the
 * network itself. `members`: the names of the model's other files; none for a model of one file.
 */
export function externalDataProblem(references: readonly ExternalDataReference[], members: ReadonlySet<string>, self?: string): string | null {
  const stray = references.find((reference) => reference.location === self || !members.has(reference.location));
  if (!stray) return null;
  const more = references.length > 1 ? ` (${references.length} tensors keep their data outside the file)` : '';
  const allowed = members.size > 0
    ? `only a file of the model itself may hold it (${[...members].join(', ')})`
    : 'a model of one file must hold its tensors itself: add the data file beside it as one of the model\'s files (files: {"model.onnx": …, "<location>": …})';
  return `initializer ${JSON.stringify(stray.tensor.slice(0, 100))} keeps its data outside the file, at ${JSON.stringify(stray.location.slice(0, 200))}, which is not a file of the model: ${allowed}${more}`;
}
