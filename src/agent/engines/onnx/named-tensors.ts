import * as ort from 'onnxruntime-node';
import { batchesAlongFirstDim, halfToNumber, numberToHalf, type Datatype, type ModelManifest } from '../../../protocol/index.js';
import { EngineError, type EngineJob, type JobOutput } from '../../core/engine.js';

/** A job's tensor as it arrives (the orchestrator checked it against the manifest; checked again here). */
interface WireTensor {
  datatype: Datatype;
  shape: number[];
  data: (number | boolean | string)[];
}

/** OIP datatypes as onnxruntime's tensor types, and the typed array each is made of. */
// `new Int32Array(values)` reads the array by index; `Int32Array.from` walks its iterator, several times as slow
// for a tensor of a tiny job.
const ORT_TYPE: Partial<Record<Datatype, { type: ort.Tensor.Type; make(values: WireTensor['data']): ort.Tensor.DataType }>> = {
  FP32: { type: 'float32', make: (values) => new Float32Array(values as number[]) },
  FP16: { type: 'float16', make: (values) => Uint16Array.from(values as number[], numberToHalf) },
  INT64: { type: 'int64', make: (values) => BigInt64Array.from(values as number[], (value) => BigInt(value)) },
  INT32: { type: 'int32', make: (values) => new Int32Array(values as number[]) },
  INT8: { type: 'int8', make: (values) => new Int8Array(values as number[]) },
  UINT8: { type: 'uint8', make: (values) => new Uint8Array(values as number[]) },
  BOOL: { type: 'bool', make: (values) => Uint8Array.from(values as boolean[], (value) => (value ? 1 : 0)) },
  BYTES: { type: 'string', make: (values) => (values as string[]) as unknown as ort.Tensor.DataType },
};

const DATATYPE_OF: Readonly<Record<string, Datatype>> = {
  float32: 'FP32', float16: 'FP16', float64: 'FP64', int64: 'INT64', int32: 'INT32', int16: 'INT16', int8: 'INT8', uint8: 'UINT8',
  uint16: 'UINT16', uint32: 'UINT32', uint64: 'UINT64', bool: 'BOOL', string: 'BYTES',
};

/**
 * Any ONNX model with the inputs and outputs its manifest names (read from its file when it was added): each job
 * brings its named tensors; when every input's first dimension is variable the batch's jobs are stacked along it and
 * run in one `session.run`, and every output split back by each job's share of that dimension; otherwise the jobs
 * run one by one. A job's result is `{ outputs: { <name>: { datatype, shape, data } } }`.
 */
export async function namedTensors(session: ort.InferenceSession, manifest: ModelManifest, jobs: readonly EngineJob[]): Promise<JobOutput[]> {
  const specs = manifest.inputs ?? [];
  if (specs.length === 0) throw new EngineError('ENGINE_FAILED', `model ${manifest.name} names no inputs: add it with gpumesh models add, or use the tensor pipeline`, false);
  const tensorsOf = (job: EngineJob): Record<string, WireTensor> => {
    const inputs = (job.input as { inputs?: Record<string, WireTensor> }).inputs;
    if (!inputs || specs.some((spec) => !inputs[spec.name])) throw new EngineError('INVALID_INPUT', `a job of ${manifest.name} must bring ${specs.map((spec) => spec.name).join(', ')}`, false);
    return inputs;
  };
  if (!batchesAlongFirstDim(specs) || jobs.length === 1) {
    const outputs: JobOutput[] = [];
    for (const job of jobs) outputs.push({ jobId: job.id, ok: true, files: [], result: { outputs: wireOutputs(await session.run(feeds([tensorsOf(job)], specs.map((spec) => spec.name)))) } });
    return outputs;
  }
  const perJob = jobs.map(tensorsOf);
  const rows = perJob.map((tensors) => tensors[specs[0]!.name]!.shape[0]!);
  const results = await session.run(feeds(perJob, specs.map((spec) => spec.name)));
  const total = rows.reduce((sum, count) => sum + count, 0);
  let offset = 0;
  return jobs.map((job, index) => {
    const share: Record<string, WireTensor> = {};
    for (const [name, tensor] of Object.entries(results)) {
      const wire = toWire(tensor);
      // An output whose first dimension is the batch's is split by each job's rows; any other is every job's whole.
      if (wire.shape[0] === total) {
        const width = wire.data.length / total;
        share[name] = { datatype: wire.datatype, shape: [rows[index]!, ...wire.shape.slice(1)], data: wire.data.slice(offset * width, (offset + rows[index]!) * width) };
      } else share[name] = wire;
    }
    offset += rows[index]!;
    return { jobId: job.id, ok: true, files: [], result: { outputs: share } };
  });
}

/** The batch's tensors by name, each the jobs' stacked along the first dimension. */
function feeds(perJob: readonly Record<string, WireTensor>[], names: readonly string[]): Record<string, ort.Tensor> {
  const fed: Record<string, ort.Tensor> = {};
  for (const name of names) {
    const parts = perJob.map((tensors) => tensors[name]!);
    const first = parts[0]!;
    const kind = ORT_TYPE[first.datatype];
    if (!kind) throw new EngineError('INVALID_INPUT', `input ${name}: ${first.datatype} tensors are not run by the ONNX engine`, false);
    const rows = parts.reduce((sum, part) => sum + part.shape[0]!, 0);
    const shape = parts.length === 1 ? first.shape : [rows, ...first.shape.slice(1)];
    // One job's flat tensor is taken as it is; the batch's are stacked (and any nesting flattened a level, as before).
    const values = parts.length === 1 && !first.data.some(Array.isArray) ? first.data : parts.flatMap((part) => part.data);
    fed[name] = new ort.Tensor(kind.type, kind.make(values), shape);
  }
  return fed;
}

function wireOutputs(results: ort.InferenceSession.OnnxValueMapType): Record<string, WireTensor> {
  return Object.fromEntries(Object.entries(results).map(([name, tensor]) => [name, toWire(tensor as ort.Tensor)]));
}

/** An output as JSON can carry it: 64-bit integers as numbers, FP16 as the numbers they are, booleans as booleans. */
function toWire(tensor: ort.Tensor): WireTensor {
  const datatype = DATATYPE_OF[tensor.type] ?? 'FP32';
  const shape = tensor.dims.map(Number);
  const raw = tensor.data as ArrayLike<number | bigint | string> & Iterable<number | bigint | string>;
  let data: WireTensor['data'];
  if (datatype === 'FP16') data = mapped(raw as Uint16Array, halfToNumber);
  else if (datatype === 'BOOL') data = mapped(raw as Uint8Array, (value) => value !== 0);
  else data = mapped(raw, (value) => (typeof value === 'bigint' ? Number(value) : value)) as WireTensor['data'];
  return { datatype, shape, data };
}

/** `Array.from(values, map)` by index: `Array.from` walks a typed array's iterator, several times as slow for a small one. */
function mapped<T, U>(values: ArrayLike<T>, map: (value: T) => U): U[] {
  const out = new Array<U>(values.length);
  for (let i = 0; i < values.length; i++) out[i] = map(values[i]!);
  return out;
}
