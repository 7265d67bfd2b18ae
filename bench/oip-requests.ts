import type { BenchClient } from './mesh-client.js';

/**
 * The OIP infer requests the benchmarks send to the built-in `simple` (Triton's example, INT32 [1, 16] × 2): in JSON,
 * and in the binary tensor data extension (a JSON header, then each input's 64 bytes; the outputs asked back as bytes).
 */
export const SIMPLE_A = Array.from({ length: 16 }, (_, i) => i);
export const SIMPLE_B = Array.from({ length: 16 }, () => 1);
export const OIP_JSON_BODY = JSON.stringify({
  inputs: [{ name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: SIMPLE_A }, { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: SIMPLE_B }],
});
export const OIP_BINARY_HEADER = JSON.stringify({
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
