import { JOB_DATATYPES, LIMITS, MeshError, type Datatype, type ModelManifest, type TensorSpec } from '../../protocol/index.js';

/** One tensor of a job: its datatype, shape, and elements, flat and row-major. */
export interface JobTensor {
  datatype: Datatype;
  shape: number[];
  data: (number | boolean | string)[];
}

/** A `tensor` job's input for a model that declares its inputs: `{ inputs: { <name>: JobTensor } }`. */
export interface NamedTensorInput {
  inputs: Record<string, JobTensor>;
}

const INT_RANGE: Partial<Record<Datatype, [number, number]>> = {
  INT8: [-128, 127], UINT8: [0, 255], INT32: [-(2 ** 31), 2 ** 31 - 1], INT64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
};

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The most dimensions a tensor has (OIP's shape, and the deepest its nested data may be). */
const MAX_RANK = 16;

/**
 * Nested arrays (as OIP allows) made flat, row-major — at most MAX_RANK levels: a value nested deeper stays a list,
 * which no datatype takes (refused by name), and the flattening's recursion stays bounded whatever was sent.
 */
function flatten(data: unknown): unknown[] {
  return Array.isArray(data) && data.some(Array.isArray) ? (data as unknown[]).flat(MAX_RANK) : (data as unknown[]);
}

/**
 * A job's tensors checked against the model's declared inputs, each refusal an INVALID_INPUT naming the tensor and
 * what is wrong: every input the model takes and no other, its datatype (given or the model's), its shape (the rank,
 * every fixed dimension; a variable one any positive size), exactly as many elements as the shape says, each a value
 * of its datatype; at most LIMITS.tensorValues elements in all. Returns the input with every tensor complete.
 */
export function checkNamedTensors(input: Record<string, unknown>, manifest: ModelManifest): NamedTensorInput {
  const model = manifest.name;
  const specs = manifest.inputs ?? [];
  const refuse = (detail: string): never => {
    throw new MeshError('INVALID_INPUT', { model, detail });
  };
  const extra = Object.keys(input).filter((key) => key !== 'inputs');
  if (extra.length) refuse(`${extra[0]}: not a field of a tensor job (it takes { inputs: { <name>: { datatype, shape, data } } })`);
  if (!isRecord(input.inputs)) refuse(`inputs: expected an object of tensors by name (${specs.map((spec) => spec.name).join(', ')})`);
  const given = input.inputs as Record<string, unknown>;
  for (const name of Object.keys(given)) {
    if (!specs.some((spec) => spec.name === name)) refuse(`inputs.${name}: the model has no input of that name (it takes: ${specs.map((spec) => spec.name).join(', ')})`);
  }
  let total = 0;
  const checked: Record<string, JobTensor> = {};
  for (const spec of specs) {
    const at = `inputs.${spec.name}`;
    const tensor = given[spec.name];
    if (!isRecord(tensor)) refuse(`${at}: missing (the model takes ${describe(spec)})`);
    const datatype = (tensor as Record<string, unknown>).datatype ?? spec.datatype;
    if (datatype !== spec.datatype) refuse(`${at}: datatype ${String(datatype)}; the model takes ${spec.datatype}`);
    if (!JOB_DATATYPES.includes(spec.datatype)) refuse(`${at}: ${spec.datatype} tensors are not carried by jobs (${JOB_DATATYPES.join(', ')} are)`);
    const shape = (tensor as Record<string, unknown>).shape;
    if (!Array.isArray(shape) || !shape.every((dim) => Number.isSafeInteger(dim) && (dim as number) > 0)) refuse(`${at}.shape: expected a list of positive integers`);
    const dims = shape as number[];
    if (dims.length !== spec.shape.length) refuse(`${at}.shape: [${dims.join(', ')}] has ${dims.length} dimensions; the model takes ${describe(spec)}`);
    for (const [index, dim] of spec.shape.entries()) {
      if (dim !== -1 && dims[index] !== dim) refuse(`${at}.shape: dimension ${index} is ${dims[index]}; the model takes ${describe(spec)}`);
    }
    const expected = dims.reduce((product, dim) => product * dim, 1);
    total += expected;
    if (total > LIMITS.tensorValues) refuse(`${at}: the tensors hold more than ${LIMITS.tensorValues} elements in all`);
    const data = flatten((tensor as Record<string, unknown>).data);
    if (!Array.isArray(data)) refuse(`${at}.data: expected a list of ${expected} values`);
    if (data.length !== expected) refuse(`${at}.data: ${data.length} values; shape [${dims.join(', ')}] holds ${expected}`);
    const bad = data.findIndex((value) => !fits(value, spec.datatype));
    if (bad >= 0) refuse(`${at}.data[${bad}]: ${describeValue(data[bad])} is not a ${spec.datatype} value`);
    checked[spec.name] = { datatype: spec.datatype, shape: dims, data: data as JobTensor['data'] };
  }
  return { inputs: checked };
}

function fits(value: unknown, datatype: Datatype): boolean {
  if (datatype === 'BOOL') return typeof value === 'boolean';
  if (datatype === 'BYTES') return typeof value === 'string';
  if (typeof value !== 'number' || !Number.isFinite(value)) return false;
  const range = INT_RANGE[datatype];
  return range === undefined ? true : Number.isInteger(value) && value >= range[0] && value <= range[1];
}

/** A refused element as the message quotes it: a list or an object by what it is (it may nest deeply), else its JSON. */
const describeValue = (value: unknown): string =>
  (Array.isArray(value) ? 'a list' : value !== null && typeof value === 'object' ? 'an object' : String(JSON.stringify(value)).slice(0, 40));

const describe = (spec: TensorSpec): string => `${spec.name} ${spec.datatype} [${spec.shape.join(', ')}]`;

/** Jobs may share a batch when every tensor but its first dimension is alike (they stack along it). */
export function namedTensorsKey(input: NamedTensorInput): string {
  return Object.entries(input.inputs).map(([name, tensor]) => `${name}:${tensor.datatype}:${tensor.shape.slice(1).join('x')}`).join(';');
}

/** Elements in all: what one job of it costs, relative to another. */
export function namedTensorsCost(input: NamedTensorInput): number {
  return Object.values(input.inputs).reduce((sum, tensor) => sum + tensor.data.length, 0);
}

/** The smallest input the model takes: every variable dimension 1, every element zero (false, ''). */
export function namedTensorsProbe(manifest: ModelManifest): NamedTensorInput {
  const inputs: Record<string, JobTensor> = {};
  for (const spec of manifest.inputs ?? []) {
    const shape = spec.shape.map((dim) => Math.max(dim, 1));
    const zero = spec.datatype === 'BOOL' ? false : spec.datatype === 'BYTES' ? '' : 0;
    inputs[spec.name] = { datatype: spec.datatype, shape, data: new Array(shape.reduce((product, dim) => product * dim, 1)).fill(zero) };
  }
  return { inputs };
}
