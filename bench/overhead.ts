/**
 * Mesh overhead: the same tiny image job (gen, 8×8, one step, PNG output) run
 * directly through the ONNX engine (its worker process, in-process client)
 * and through the whole mesh (HTTP → orchestrator → SQLite → link → agent →
 * engine → blob upload → publish → SSE), sequentially, one at a time.
 *
 *   npm run bench:overhead -- [--runs 1000] [--warmup 100]
 */
import { parseArgs } from 'node:util';
import http from 'node:http';
import { createParser } from 'eventsource-parser';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { loadBuiltin, printTable, summarize, writeResults } from './lib.js';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '1000' }, warmup: { type: 'string', default: '100' } } });
const RUNS = Number(values.runs);
const WARMUP = Number(values.warmup);
const INPUT = { prompt: 'overhead', seed: 1, width: 8, height: 8, steps: 1 };

async function direct(): Promise<number[]> {
  const { loaded, close } = await loadBuiltin('gen');
  const times: number[] = [];
  for (let i = 0; i < WARMUP + RUNS; i++) {
    const start = performance.now();
    const [output] = await loaded.run([{ id: `d${i}`, input: INPUT }], () => {});
    if (!output?.ok) throw new Error('direct run failed');
    if (i >= WARMUP) times.push(performance.now() - start);
  }
  await close();
  return times;
}

async function mesh(): Promise<number[]> {
  const running = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' } });
  try {
    // One event stream for the whole run; each job's latency ends at its `succeeded` event.
    const waiting = new Map<string, () => void>();
    const early = new Set<string>();
    // node:http with keep-alive: Node 20's fetch costs about a millisecond a request, which would be measured as mesh overhead.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
    const url = new URL(running.url);
    const request = (method: string, path: string, body?: string): Promise<http.IncomingMessage> => new Promise((resolve, reject) => {
      const outgoing = http.request({
        host: url.hostname, port: url.port, method, path, agent,
        headers: { authorization: `Bearer ${running.admin}`, 'content-type': 'application/json' },
      }, resolve);
      outgoing.on('error', reject);
      outgoing.end(body);
    });
    const stream = await request('GET', '/v1/events');
    const parser = createParser({
      onEvent: (message) => {
        if (message.event !== 'succeeded' && message.event !== 'failed') return;
        const { jobId } = JSON.parse(message.data) as { jobId: string };
        const resolve = waiting.get(jobId);
        if (resolve) resolve();
        else early.add(jobId);
      },
    });
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => parser.feed(chunk));
    const body = JSON.stringify({ type: 'image', input: INPUT });
    const times: number[] = [];
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const start = performance.now();
      const accepted = await request('POST', '/v1/jobs', body);
      let text = '';
      for await (const chunk of accepted) text += chunk;
      const { id } = JSON.parse(text) as { id: string };
      if (!early.delete(id)) await new Promise<void>((resolve) => waiting.set(id, resolve));
      waiting.delete(id);
      if (i >= WARMUP) times.push(performance.now() - start);
    }
    stream.destroy();
    agent.destroy();
    return times;
  } finally {
    await running.stop();
    removeDir(running.data);
  }
}

const directTimes = await direct();
const meshTimes = await mesh();
const d = summarize(directTimes);
const m = summarize(meshTimes);
const rows: (string | number)[][] = [
  ['direct engine call', d.p50, d.p90, d.p99, d.mean],
  ['through the mesh', m.p50, m.p90, m.p99, m.mean],
  ['mesh overhead', m.p50 - d.p50, m.p90 - d.p90, m.p99 - d.p99, m.mean - d.mean],
];
printTable(`gen 8×8, 1 step, ${RUNS} sequential runs after ${WARMUP} warm-up (ms)`, ['path', 'p50', 'p90', 'p99', 'mean'], rows);
const path = writeResults('overhead', {
  runs: RUNS, warmup: WARMUP, input: INPUT, direct: d, mesh: m,
  overhead: { p50: m.p50 - d.p50, p90: m.p90 - d.p90, p99: m.p99 - d.p99, mean: m.mean - d.mean },
  target: { p50: 0.5, p99: 2 },
});
process.stdout.write(`\nwrote ${path}\n`);
