import { ServerHttp, type ServerHttpOptions } from '../kit/http.js';
import { ServerError } from '../kit/server-error.js';
import { decodeTensor, encodeTensor, flattenData } from './tensors.js';

/** `GET /v2` */
export interface ServerMetadata {
  name?: string;
  version?: string;
  extensions?: string[];
}

export interface TensorMetadata {
  name: string;
  datatype: string;
  /** −1 marks a variable dimension. */
  shape: number[];
}

/** `GET /v2/models/{m}[/versions/{v}]` */
export interface ModelMetadata {
  name: string;
  versions?: string[];
  platform?: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
}

/** One tensor going in or coming out of an inference. */
export interface Tensor {
  name: string;
  datatype: string;
  shape: number[];
  values: ArrayLike<number>;
}

export interface InferOptions {
  /** Send FP32 input as raw bytes and ask for outputs as raw bytes (the binary tensor data extension). */
  binary: boolean;
  /** The output wanted; null: all of them. */
  output: string | null;
  signal?: AbortSignal;
}

/** The binary tensor data extension's name in `GET /v2` extensions. */
export const BINARY_EXTENSION = 'binary_tensor_data';
const HEADER_LENGTH = 'inference-header-content-length';

/** Build an infer request body: JSON alone, or the JSON header followed by the input's bytes. */
export function encodeInferRequest(input: Tensor, options: Pick<InferOptions, 'binary' | 'output'>): { body: Uint8Array<ArrayBuffer>; headers: Record<string, string> } {
  const binaryInput = options.binary && input.datatype === 'FP32';
  const bytes = binaryInput ? encodeTensor(input.datatype, input.values) : null;
  const header = {
    inputs: [{
      name: input.name, shape: input.shape, datatype: input.datatype,
      ...(bytes ? { parameters: { binary_data_size: bytes.byteLength } } : { data: Array.from(input.values) }),
    }],
    ...(options.output ? { outputs: [{ name: options.output, parameters: { binary_data: options.binary } }] } : {}),
    ...(options.binary && !options.output ? { parameters: { binary_data_output: true } } : {}),
  };
  const json = new TextEncoder().encode(JSON.stringify(header));
  if (!bytes) return { body: json, headers: { 'content-type': 'application/json' } };
  const body = new Uint8Array(json.byteLength + bytes.byteLength);
  body.set(json, 0);
  body.set(bytes, json.byteLength);
  return { body, headers: { 'content-type': 'application/octet-stream', [HEADER_LENGTH]: String(json.byteLength) } };
}

interface ResponseOutput {
  name: string;
  datatype: string;
  shape: number[];
  parameters?: { binary_data_size?: number };
  data?: unknown;
}

/** Read an infer response: JSON, or a JSON header whose binary outputs follow it in order. */
export function decodeInferResponse(body: Uint8Array, headerLength: number | null): Tensor[] {
  const jsonEnd = headerLength ?? body.byteLength;
  // Caught by the engine's request, which reports a malformed answer as the server's protocol error (ServerError).
  if (jsonEnd > body.byteLength) throw new Error(`the response header claims ${jsonEnd} bytes of ${body.byteLength}`);
  const header = JSON.parse(new TextDecoder().decode(body.subarray(0, jsonEnd))) as { outputs?: ResponseOutput[] };
  let offset = jsonEnd;
  return (header.outputs ?? []).map((output) => {
    const size = output.parameters?.binary_data_size;
    if (size === undefined) return { name: output.name, datatype: output.datatype, shape: output.shape, values: flattenData(output.data ?? []) };
    if (offset + size > body.byteLength) throw new Error(`output ${output.name} claims ${size} bytes past the end of the response`);
    const values = decodeTensor(output.datatype, body.subarray(offset, offset + size));
    offset += size;
    return { name: output.name, datatype: output.datatype, shape: output.shape, values };
  });
}

/** A server that speaks the Open Inference Protocol v2 over REST (Triton, KServe, MLServer…). */
export class OipClient extends ServerHttp {
  constructor(options: Omit<ServerHttpOptions, 'name'>) {
    super({ ...options, name: 'the inference server' });
  }

  serverMetadata(): Promise<ServerMetadata> {
    return this.json<ServerMetadata>('GET', '/v2');
  }

  modelMetadata(path: string): Promise<ModelMetadata> {
    return this.json<ModelMetadata>('GET', path);
  }

  /** Ready is a 200 (Triton answers with no body; KServe with `{name, ready}`). */
  async modelReady(path: string): Promise<boolean> {
    try {
      const body = await this.json<{ ready?: boolean } | undefined>('GET', `${path}/ready`);
      return body?.ready !== false;
    } catch (error) {
      if (error instanceof ServerError && error.status !== null && !error.busy && error.status < 500) return false;
      throw error;
    }
  }

  /** Triton's model configuration (`model_configuration` extension): its `max_batch_size`, or null. */
  async maxBatchSize(path: string): Promise<number | null> {
    const config = await this.json<{ max_batch_size?: number } | undefined>('GET', `${path}/config`);
    return typeof config?.max_batch_size === 'number' ? config.max_batch_size : null;
  }

  /** One inference; stateless, so a dropped connection is sent again. */
  async infer(path: string, input: Tensor, options: InferOptions): Promise<Tensor[]> {
    const { body, headers } = encodeInferRequest(input, options);
    const reply = await this.request('POST', `${path}/infer`, { body, headers, idempotent: true, signal: options.signal });
    const headerLength = reply.headers[HEADER_LENGTH];
    return decodeInferResponse(new Uint8Array(reply.bytes), typeof headerLength === 'string' ? Number(headerLength) : null);
  }
}
