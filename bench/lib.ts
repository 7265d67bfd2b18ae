import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';

/** Percentile by nearest rank over a sorted copy. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export interface Summary {
  n: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export function summarize(values: readonly number[]): Summary {
  return {
    n: values.length,
    mean: values.reduce((sum, value) => sum + value, 0) / Math.max(1, values.length),
    p50: percentile(values, 50),
    p90: percentile(values, 90),
    p99: percentile(values, 99),
    max: Math.max(...values),
  };
}

/** A process's `/proc/<pid>/stat` fields after its name (whose parentheses may hold spaces); null when it is gone. */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
  } catch {
    return null;
  }
}

/**
 * The CPU time these processes have used, every thread of each (ms; Linux's /proc, else NaN). Taken before and after
 * a round, it gives the CPU a job costs: a figure the VM's drift moves less than a rate (bench/RESULTS.md).
 */
export function cpuMs(pids: readonly number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    const fields = statFields(pid);
    if (!fields) return NaN;
    // utime and stime, in clock ticks of 10 ms (USER_HZ is 100 on Linux).
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks * 10;
}

/** `pid` and every process below it (an orchestrator's engine workers, a worker's ffmpeg), from /proc; [pid] elsewhere. */
export function processTree(pid: number): number[] {
  let all: number[];
  try {
    all = readdirSync('/proc').filter((name) => /^\d+$/.test(name)).map(Number);
  } catch {
    return [pid];
  }
  const children = new Map<number, number[]>();
  for (const candidate of all) {
    const parent = Number(statFields(candidate)?.[1]);
    if (Number.isInteger(parent)) children.set(parent, [...(children.get(parent) ?? []), candidate]);
  }
  const tree = [pid];
  for (let i = 0; i < tree.length; i++) tree.push(...(children.get(tree[i]!) ?? []));
  return tree;
}

export function machine(): Record<string, unknown> {
  return {
    cpu: cpus()[0]?.model.trim(), cores: cpus().length, memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version, platform: `${process.platform}-${process.arch}`, date: new Date().toISOString(),
  };
}

export function printTable(title: string, headers: string[], rows: (string | number)[][]): void {
  const cells = rows.map((row) => row.map((cell) => (typeof cell === 'number' ? format(cell) : cell)));
  const widths = headers.map((header, column) => Math.max(header.length, ...cells.map((row) => row[column]!.length)));
  const line = (row: string[]): string => row.map((cell, column) => cell.padStart(widths[column]!)).join('  ');
  process.stdout.write(`\n${title}\n${line(headers)}\n${widths.map((width) => '-'.repeat(width)).join('  ')}\n${cells.map(line).join('\n')}\n`);
}

function format(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  if (Math.abs(value) >= 100) return value.toFixed(0);
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(3);
}

/** Write a benchmark's results to bench/out/<name>.json; returns the path. */
export function writeResults(name: string, results: unknown): string {
  const dir = join(new URL('.', import.meta.url).pathname, 'out');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${name}.json`);
  writeFileSync(path, `${JSON.stringify({ name, machine: machine(), results }, null, 2)}\n`);
  return path;
}

/**
 * A built-in model loaded in a real ONNX engine worker process, for engine-level measurements. `from: 'dist'` uses
 * the compiled engine (run `npm run build` first), whose worker is the compiled `worker.js` the agent forks; from
 * `src` the worker boots through tsx, which takes longer to start.
 */
export async function loadBuiltin(name: 'gen' | 'mlp', budgetMB = 4096, from: 'src' | 'dist' = 'src') {
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { pino } = await import('pino');
  const base = new URL(from === 'dist' ? '../dist/' : '../src/', import.meta.url).href;
  const { OnnxEngine } = await import(`${base}agent/engines/onnx/engine.js`) as typeof import('../src/agent/engines/onnx/engine.js');
  const { cpuDevice } = await import(`${base}agent/devices.js`) as typeof import('../src/agent/devices.js');
  const { Supervisor } = await import(`${base}agent/governance/supervisor.js`) as typeof import('../src/agent/governance/supervisor.js');
  const { builtinModel, MLP_INPUT_DIM, MLP_OUTPUT_DIM, GEN_DEFAULT_STEPS } = await import(`${base}builtin-models/index.js`) as typeof import('../src/builtin-models/index.js');
  const model = builtinModel(name)!;
  const dir = mkdtempSync(join(tmpdir(), 'gpumesh-bench-'));
  const path = join(dir, `${name}.onnx`);
  writeFileSync(path, model.bytes);
  const engine = new OnnxEngine(new Supervisor(pino({ level: 'warn' })));
  const loaded = await engine.load({
    name, version: model.version, engine: 'onnx', digest: model.digest,
    bytes: model.bytes.length, memoryMB: model.memoryMB, jobTypes: model.jobTypes,
    params: name === 'gen' ? { defaultSteps: GEN_DEFAULT_STEPS } : { inputDim: MLP_INPUT_DIM, outputDim: MLP_OUTPUT_DIM },
    // The settings the registry gives the built-in (models.ts), so the direct call runs the model as the mesh does.
    settings: { pipeline: name === 'gen' ? 'cppn-image' : 'tensor', ...(model.threads !== undefined ? { threads: model.threads } : {}) },
  }, path, cpuDevice(budgetMB));
  return {
    loaded,
    async close() {
      await loaded.unload();
      await engine.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
