/**
 * Cold start from zero: the time to a job's result with its engine stopped (scaled to zero: no process, nothing
 * resident) against the same job with the engine already running, for two engines:
 *
 *   onnx     the built-in `gen` generator (8×8, one step) in the ONNX engine's worker process, which the agent forks
 *            on the first load and stops with its last model (`--idle-unload 1`)
 *   server   an OpenAI-style image server the agent starts from the model's command template: the stand-in
 *            test/fixtures/standins/openai-images-standin.ts with a declared start delay (it "loads" that long
 *            before it listens), readiness by polling GET /v1/models, stopped after its idle window (idleStopMs)
 *
 * One real mesh (`gpumesh up`: the orchestrator and its local agent in one process; the engines are its children). Each round: wait until the model
 * is unloaded and its engine process is gone, submit one job (cold), then one more at once (warm). A cold job's
 * `loading` event carries the agent's split of its load (spawn: exec/fork until the process runs; ready: until the
 * worker reported ready or the server's readiness check passed; init: the model's load inside the engine); its
 * record carries the engine's compute time (run). gpumesh added = time to first result − (spawn + ready + init + run).
 * As a cross-check, the engines alone (outside the mesh: the same compiled worker forked and loaded in-process, the
 * same stand-in command spawned until it prints that it listens) are timed too.
 *
 *   npm run bench:cold-start -- [--runs 10] [--start-delay-ms 300] [--readiness http|log]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { removeDir, ROOT, startMesh, waitFor, type RunningMesh } from '../test/helpers/mesh.js';
import { childrenOf } from '../test/helpers/procfs.js';
import { loadBuiltin, percentile, printTable, writeResults } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '10' }, 'start-delay-ms': { type: 'string', default: '300' }, readiness: { type: 'string', default: 'http' } } });
const RUNS = Number(values.runs);
const START_DELAY_MS = Number(values['start-delay-ms']);
const SLOW_MS = 10;
const READY_INTERVAL_MS = 50;
/** How the agent sees the server ready: `http` polls GET /v1/models (5 ms, doubling up to READY_INTERVAL_MS); `log` waits for its "listening" line. */
const READINESS = values.readiness === 'log'
  ? { logLine: 'listening on port', timeoutMs: 60_000 }
  : { http: '/v1/models', timeoutMs: 60_000, intervalMs: READY_INTERVAL_MS };
const STANDIN = join(ROOT, 'test/fixtures/standins/openai-images-standin.ts');
const standinArgs = (port: string): string[] => ['--import', 'tsx', STANDIN, '--port', port, '--models', 'srv', '--slow-ms', String(SLOW_MS), '--start-delay-ms', String(START_DELAY_MS)];

const CASES = {
  onnx: { model: 'gen', process: 'onnx/worker', job: { type: 'image', model: 'gen', input: { prompt: 'cold', seed: 1, width: 8, height: 8, steps: 1 } } },
  server: { model: 'srv', process: 'openai-images-standin', job: { type: 'image', model: 'srv', input: { prompt: 'cold', seed: 1, width: 64, height: 64 } } },
} as const;
type Case = keyof typeof CASES;

interface Run {
  ttfrMs: number;
  computeMs: number;
  loadMs: number;
  phases: { pullMs: number; evictMs: number; spawnMs?: number; readyMs?: number; initMs: number } | null;
  /** Client-side arrival of the job's events, ms after submit. */
  events: Record<string, number>;
}

const median = (list: readonly number[]): number => percentile(list, 50);

// ---- The engines alone, outside the mesh --------------------------------------------------------------------------

async function onnxAlone(): Promise<{ loadMs: number[]; runMs: number[] }> {
  const loadMs: number[] = [];
  const runMs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    let start = performance.now();
    const { loaded, close } = await loadBuiltin('gen', 4096, 'dist'); // fork the compiled worker (as the agent does), boot it, build the session
    loadMs.push(performance.now() - start);
    start = performance.now();
    const { outputs: [output] } = await loaded.run([{ id: `a${i}`, input: CASES.onnx.job.input }], () => {});
    if (!output?.ok) throw new Error('the direct run failed');
    runMs.push(performance.now() - start);
    await close();
  }
  return { loadMs, runMs };
}

const freePort = (): Promise<number> => new Promise((resolve, reject) => {
  const server = createServer().listen(0, '127.0.0.1', () => {
    const address = server.address();
    server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
  });
});

function get(port: number, method: string, path: string, body?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request({ host: '127.0.0.1', port, method, path, agent: false, headers: body ? { 'content-type': 'application/json' } : {} }, (response) => {
      response.resume();
      response.on('end', () => resolve(response.statusCode ?? 0));
    });
    request.on('error', reject);
    request.end(body);
  });
}

async function serverAlone(): Promise<{ readyMs: number[]; runMs: number[] }> {
  const readyMs: number[] = [];
  const runMs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const port = await freePort();
    const start = performance.now();
    const child = spawn(process.execPath, standinArgs(String(port)), { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      // Ready when it says it listens (its own word, no polling: polling this 2-core machine every few ms slowed its boot).
      await new Promise<void>((resolve, reject) => {
        let text = '';
        const timer = setTimeout(() => reject(new Error('the stand-in did not listen within 30 s')), 30_000);
        child.stdout!.on('data', (chunk: Buffer) => {
          text += chunk.toString();
          if (text.includes('listening on port')) {
            clearTimeout(timer);
            resolve();
          }
        });
        child.once('exit', (code) => reject(new Error(`the stand-in exited with ${code}`)));
      });
      readyMs.push(performance.now() - start);
      child.stdout!.resume();
      const ran = performance.now();
      const status = await get(port, 'POST', '/v1/images/generations', JSON.stringify({ model: 'srv', prompt: 'cold', n: 1, size: '64x64', response_format: 'b64_json' }));
      if (status !== 200) throw new Error(`the stand-in answered ${status}`);
      runMs.push(performance.now() - ran);
    } finally {
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    }
  }
  return { readyMs, runMs };
}

// ---- Through the mesh -----------------------------------------------------------------------------------------------

const mesh: RunningMesh = await startMesh({
  args: ['--idle-unload', '1'],
  env: { GPUMESH_LOG_LEVEL: 'warn' },
  config: {
    models: {
      srv: {
        engine: 'openai-images', types: ['image'], memoryMB: 64,
        settings: {
          model: 'srv',
          command: `'${process.execPath}' ${standinArgs('$' + '{PORT}').join(' ')}`,
          readiness: READINESS,
          idleStopMs: 300, stopGraceMs: 2000,
        },
      },
    },
  },
});
const client = new BenchClient(mesh.url, mesh.admin, 4);
const seen = new Map<string, Record<string, number>>();
const phasesOf = new Map<string, Run['phases']>();

async function resident(model: string): Promise<boolean> {
  const reply = await client.request('GET', '/v1/hosts');
  const body = JSON.parse(reply.text) as { hosts?: Array<{ resident: Array<{ model: string }> }> } | Array<{ resident: Array<{ model: string }> }>;
  const hosts = Array.isArray(body) ? body : body.hosts ?? [];
  return hosts.some((host) => (host.resident ?? []).some((entry) => entry.model === model));
}

async function runOnce(name: Case, tag: string): Promise<Run> {
  const start = performance.now();
  const id = await client.submit({ ...CASES[name].job, input: { ...CASES[name].job.input, prompt: `${tag}` } });
  const end = await client.completion(id);
  if (end.type !== 'succeeded') throw new Error(`job ${id} ${end.type}`);
  const view = JSON.parse((await client.request('GET', `/v1/jobs/${id}`)).text) as { attempts: Array<{ status: string; loadMs: number | null; computeMs: number | null }> };
  const attempt = view.attempts.find((entry) => entry.status === 'succeeded')!;
  const events = Object.fromEntries(Object.entries(seen.get(id) ?? {}).map(([type, at]) => [type, at - start]));
  return { ttfrMs: end.at - start, computeMs: attempt.computeMs ?? NaN, loadMs: attempt.loadMs ?? 0, phases: phasesOf.get(id) ?? null, events };
}

async function meshRuns(name: Case): Promise<{ cold: Run[]; warm: Run[] }> {
  const cold: Run[] = [];
  const warm: Run[] = [];
  const { model, process: match } = CASES[name];
  for (let i = 0; i < RUNS; i++) {
    // Scaled to zero: nothing resident, the engine's process gone; then a quiet moment.
    await waitFor(async () => !(await resident(model)) && childrenOf(mesh.process.pid!, match).length === 0, { timeoutMs: 30_000, intervalMs: 50, what: `${model} to scale to zero` });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const first = await runOnce(name, `cold ${i}`);
    if (!first.phases || first.loadMs <= 0) throw new Error(`cold run ${i} of ${model} did not load (loadMs ${first.loadMs})`);
    if (first.phases.spawnMs === undefined) throw new Error(`cold run ${i} of ${model} reused a running engine process`);
    cold.push(first);
    const second = await runOnce(name, `warm ${i}`);
    if (second.loadMs > 0) throw new Error(`warm run ${i} of ${model} loaded again`);
    warm.push(second);
  }
  return { cold, warm };
}

let meshResults: Record<Case, { cold: Run[]; warm: Run[] }>;
try {
  await client.listen(['dispatched', 'loading', 'running'], (type, data, at) => {
    const id = String(data.jobId);
    const times = seen.get(id) ?? {};
    const key = type === 'loading' && data.loadMs !== undefined ? 'loaded' : type;
    times[key] ??= at;
    seen.set(id, times);
    if (type === 'loading' && data.phases) phasesOf.set(id, data.phases as Run['phases']);
  });
  meshResults = { onnx: await meshRuns('onnx'), server: await meshRuns('server') };
} finally {
  client.close();
  await mesh.stop();
  removeDir(mesh.data);
}
const alone = { onnx: await onnxAlone(), server: await serverAlone() };

// ---- Report --------------------------------------------------------------------------------------------------------

const results: Record<string, unknown> = {};
const rows: (string | number)[][] = [];
const verdicts: string[] = [];
for (const name of Object.keys(CASES) as Case[]) {
  const { cold, warm } = meshResults[name];
  const m = (pick: (run: Run) => number, runs = cold): number => median(runs.map(pick));
  const spawnMs = m((run) => run.phases?.spawnMs ?? 0);
  const readyMs = m((run) => run.phases?.readyMs ?? 0);
  const initMs = m((run) => run.phases?.initMs ?? 0);
  const pullEvictMs = m((run) => (run.phases?.pullMs ?? 0) + (run.phases?.evictMs ?? 0));
  const loadMs = m((run) => run.loadMs);
  const runMs = m((run) => run.computeMs);
  const ttfr = m((run) => run.ttfrMs);
  const engineOwn = (run: Run): number => (run.phases?.spawnMs ?? 0) + (run.phases?.readyMs ?? 0) + (run.phases?.initMs ?? 0) + run.computeMs;
  const added = m((run) => run.ttfrMs - engineOwn(run));
  const agentLoadShare = m((run) => run.loadMs - ((run.phases?.spawnMs ?? 0) + (run.phases?.readyMs ?? 0) + (run.phases?.initMs ?? 0)));
  const warmTtfr = m((run) => run.ttfrMs, warm);
  const warmRun = m((run) => run.computeMs, warm);
  const warmAdded = m((run) => run.ttfrMs - run.computeMs, warm);
  const aloneStart = name === 'onnx' ? median(alone.onnx.loadMs) : median(alone.server.readyMs);
  const aloneRun = median(name === 'onnx' ? alone.onnx.runMs : alone.server.runMs);
  const addedVsAlone = ttfr - (aloneStart + aloneRun);
  const submitToDispatch = m((run) => run.events.dispatched ?? NaN);
  const submitToLoading = m((run) => run.events.loading ?? NaN);
  const startTotal = m((run) => (run.phases?.spawnMs ?? 0) + (run.phases?.readyMs ?? 0) + (run.phases?.initMs ?? 0));
  rows.push([`${name}: engine stopped (cold)`, ttfr, spawnMs, readyMs, initMs, startTotal, runMs, added]);
  rows.push([`${name}: engine running (warm)`, warmTtfr, '—', '—', '—', '—', warmRun, warmAdded]);
  rows.push([`${name}: engine alone, outside the mesh`, aloneStart + aloneRun, '—', '—', '—', aloneStart, aloneRun, '—']);
  results[name] = {
    median: { cold: { ttfrMs: ttfr, spawnMs, readyMs, initMs, engineStartMs: startTotal, pullEvictMs, loadMs, runMs, addedMs: added, agentLoadShareMs: agentLoadShare, submitToDispatchMs: submitToDispatch, submitToLoadingMs: submitToLoading },
      warm: { ttfrMs: warmTtfr, runMs: warmRun, addedMs: warmAdded },
      alone: { startMs: aloneStart, runMs: aloneRun }, addedVsAloneMs: addedVsAlone },
    runs: { cold, warm, alone: alone[name] },
  };
  verdicts.push(`${name}: gpumesh added ${added.toFixed(1)} ms to a cold start (median; the agent's own share of the load ${agentLoadShare.toFixed(1)} ms, `
    + `submit → dispatched ${submitToDispatch.toFixed(1)} ms), ${warmAdded.toFixed(1)} ms to a warm run; against the engine alone ${addedVsAlone.toFixed(1)} ms — `
    + `target ≤ 100 ms: ${added <= 100 ? 'met' : 'not met'}`);
}
printTable(`time to first result, median of ${RUNS} rounds (ms); server: stand-in with a declared ${START_DELAY_MS} ms start delay, readiness ${values.readiness === 'log' ? 'by its "listening" log line' : `polled up to every ${READY_INTERVAL_MS} ms`}`,
  ['case', 'to result', 'spawn', 'ready', 'load (init)', 'engine start', 'run', 'gpumesh added'], rows);
process.stdout.write(`\n${verdicts.join('\n')}\n`);
const path = writeResults('cold-start', {
  runs: RUNS, startDelayMs: START_DELAY_MS, readiness: READINESS, slowMs: SLOW_MS, cases: CASES, target: { addedMs: 100 }, results,
});
process.stdout.write(`\nwrote ${path}\n`);
