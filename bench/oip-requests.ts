import type { BenchClient } from './mesh-client.js';
import { RawHttpClient } from './raw-http-client.js';

/**
 * The OIP infer requests the benchmarks send to the built-in `simple` (Triton's example, INT32 [1, 16] × 2): in JSON,
 * and in the binary tensor data extension (a JSON header, then each input's 64 bytes; the outputs asked back as bytes).
 * Each names its `id`, which the answer echoes, so that every answer to the same request is the same bytes.
 */
export const SIMPLE_A = Array.from({ length: 16 }, (_, i) => i);
export const SIMPLE_B = Array.from({ length: 16 }, () => 1);
export const OIP_JSON_BODY = JSON.stringify({
  id: 'bench',
  inputs: [{ name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: SIMPLE_A }, { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: SIMPLE_B }],
});
export const OIP_BINARY_HEADER = JSON.stringify({
  id: 'bench',
  inputs: [{ name: 'INPUT0', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: 64 } }, { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: 64 } }],
  parameters: { binary_data_output: true },
});
const int32s = (list: readonly number[]): Buffer => Buffer.from(new Int32Array(list).buffer);
export const OIP_BINARY_BODY = Buffer.concat([Buffer.from(OIP_BINARY_HEADER), int32s(SIMPLE_A), int32s(SIMPLE_B)]);
const BINARY_HEADERS = { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(Buffer.byteLength(OIP_BINARY_HEADER)) };

/** One infer request on `simple` (or `model`, the same network added under another name); throws unless it is a 200. */
export async function oipRequest(client: BenchClient, encoding: 'json' | 'binary', model = 'simple'): Promise<void> {
  const path = `/v2/models/${model}/infer`;
  const reply = encoding === 'json' ? await client.request('POST', path, OIP_JSON_BODY) : await client.request('POST', path, OIP_BINARY_BODY, BINARY_HEADERS);
  if (reply.status !== 200) throw new Error(`OIP ${encoding} on ${model}: ${reply.status} ${reply.text.slice(0, 200)}`);
}

/** `simple`'s outputs for SIMPLE_A and SIMPLE_B: their sum and their difference. */
const EXPECTED: Record<string, number[]> = { OUTPUT0: SIMPLE_A.map((a, i) => a + SIMPLE_B[i]!), OUTPUT1: SIMPLE_A.map((a, i) => a - SIMPLE_B[i]!) };

/** An answer's outputs, read from its JSON or, for binary outputs, from the bytes after its JSON header. */
function outputsOf(body: Buffer, encoding: 'json' | 'binary'): Record<string, number[]> {
  const binaryBytes = encoding === 'binary' ? 2 * 64 : 0;
  const header = JSON.parse(body.subarray(0, body.length - binaryBytes).toString('utf8')) as { id: string; outputs: { name: string; data?: number[]; parameters?: { binary_data_size: number } }[] };
  if (header.id !== 'bench') throw new Error(`OIP ${encoding}: the answer's id is ${header.id}, not the request's`);
  let offset = body.length - binaryBytes;
  return Object.fromEntries(header.outputs.map((output) => {
    if (output.data) return [output.name, output.data];
    const size = output.parameters!.binary_data_size;
    const bytes = body.subarray(offset, (offset += size));
    return [output.name, Array.from(new Int32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + size)))];
  }));
}

/**
 * OIP infer on `simple` from a client like Triton's perf_analyzer (RawHttpClient: one connection, the request's bytes
 * built once). The first answer is checked output by output; every later one must be the same bytes.
 */
export class RawOipClient {
  readonly #client: RawHttpClient;
  readonly #request: Buffer;
  readonly #encoding: 'json' | 'binary';
  #checked: Buffer | null = null;

  constructor(url: string, grant: string, encoding: 'json' | 'binary', model = 'simple') {
    this.#client = new RawHttpClient(url);
    this.#encoding = encoding;
    const headers = encoding === 'json' ? { 'content-type': 'application/json' } : BINARY_HEADERS;
    this.#request = RawHttpClient.request(url, 'POST', `/v2/models/${model}/infer`, { authorization: `Bearer ${grant}`, ...headers }, encoding === 'json' ? OIP_JSON_BODY : OIP_BINARY_BODY);
  }

  async infer(): Promise<void> {
    const body = await this.#client.send(this.#request);
    if (this.#checked) {
      if (!body.equals(this.#checked)) throw new Error(`OIP ${this.#encoding}: an answer differs from the first: ${body.toString('utf8', 0, 200)}`);
      return;
    }
    const outputs = outputsOf(body, this.#encoding);
    for (const [name, values] of Object.entries(EXPECTED)) {
      if (JSON.stringify(outputs[name]) !== JSON.stringify(values)) throw new Error(`OIP ${this.#encoding}: ${name} is ${JSON.stringify(outputs[name])}, not ${JSON.stringify(values)}`);
    }
    this.#checked = Buffer.from(body);
  }

  close(): void {
    this.#client.close();
  }
}
