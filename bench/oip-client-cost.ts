/**
 * How much of bench:oip's rate at concurrency 1 is its own client's: the same OIP JSON infer on `simple`, one request
 * at a time, from the benchmarks' Node `http` client (bench/mesh-client.ts, what bench:oip and bench:ab use) and from a
 * lean one — one keep-alive socket, the request's bytes built once, the answer read by its Content-Length, about what
 * a C++ client such as Triton's perf_analyzer does — in alternating rounds against one `gpumesh up`. The client shares
 * the VM's two cores with the server, so its CPU time is in every round trip.
 *
 *   node --import tsx bench/oip-client-cost.ts [--bin <another build's bin/gpumesh.js>] [--requests 3000] [--rounds 3]
 */
import net from 'node:net';
import { parseArgs } from 'node:util';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { BenchClient } from './mesh-client.js';
import { OIP_JSON_BODY, oipRequest } from './oip-requests.js';

const { values } = parseArgs({ options: { bin: { type: 'string' }, requests: { type: 'string', default: '3000' }, rounds: { type: 'string', default: '3' } } });
const REQUESTS = Number(values.requests);

const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' }, ...(values.bin ? { bin: values.bin } : {}) });
const url = new URL(mesh.url);
const request = Buffer.from(
  `POST /v2/models/simple/infer HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${mesh.admin}\r\ncontent-type: application/json\r\n`
  + `content-length: ${Buffer.byteLength(OIP_JSON_BODY)}\r\n\r\n${OIP_JSON_BODY}`,
);
const socket = net.connect(Number(url.port), url.hostname).setNoDelay(true);
await new Promise((resolve) => socket.once('connect', resolve));
let received: Buffer = Buffer.alloc(0);
let answered: (() => void) | null = null;
socket.on('data', (chunk: Buffer) => {
  received = received.length > 0 ? Buffer.concat([received, chunk]) : chunk;
  const headEnd = received.indexOf('\r\n\r\n');
  if (headEnd < 0) return;
  const head = received.subarray(0, headEnd).toString('latin1');
  if (!head.startsWith('HTTP/1.1 200')) throw new Error(`lean client: ${head.split('\r\n')[0]}`);
  const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1]);
  if (received.length < headEnd + 4 + length) return;
  received = received.subarray(headEnd + 4 + length);
  const done = answered;
  answered = null;
  done?.();
});
const lean = (): Promise<void> => new Promise((resolve) => {
  answered = resolve;
  socket.write(request);
});
const client = new BenchClient(mesh.url, mesh.admin, 1);
const node = (): Promise<void> => oipRequest(client, 'json');
const rate = async (send: () => Promise<void>, count: number): Promise<number> => {
  const started = performance.now();
  for (let i = 0; i < count; i++) await send();
  return (1000 * count) / (performance.now() - started);
};

await rate(lean, 2000);
await rate(node, 2000);
const rounds: { node: number; lean: number }[] = [];
for (let round = 0; round < Number(values.rounds); round++) {
  // Taken in turn, the first alternating, so neither always runs on a VM that just warmed or cooled.
  const order = round % 2 === 0 ? (['node', 'lean'] as const) : (['lean', 'node'] as const);
  const result = { node: 0, lean: 0 };
  for (const which of order) result[which] = await rate(which === 'node' ? node : lean, REQUESTS);
  rounds.push(result);
  process.stdout.write(`round ${round + 1}: Node http client ${result.node.toFixed(0)} infer/s, lean client ${result.lean.toFixed(0)} infer/s\n`);
}
const median = (list: number[]): number => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
process.stdout.write(`median round: Node http client ${median(rounds.map((r) => r.node)).toFixed(0)}, lean client ${median(rounds.map((r) => r.lean)).toFixed(0)} infer/s\n`);
socket.destroy();
client.close();
await mesh.stop();
removeDir(mesh.data);
