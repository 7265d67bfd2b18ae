/**
 * Fuzzing at scale: the generators of test/integration/fuzz.test.ts, run for many
 * more inputs against a real `gpumesh up --no-agent` process. Every route in the
 * server's OpenAPI document, paths no route declares, raw HTTP bytes and the agent
 * link each get an equal share. Prints route × inputs × statuses seen × failures,
 * writes bench/out/fuzz.json, and exits non-zero on any failure.
 *
 *   npm run bench:fuzz -- [--inputs 10000] [--seed 42]
 */
import { parseArgs } from 'node:util';
import fc from 'fast-check';
import { FUZZ_MESH_CONFIG, FuzzSession } from '../test/fuzz/session.js';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { printTable, writeResults } from './lib.js';

const { values } = parseArgs({ options: { inputs: { type: 'string', default: '10000' }, seed: { type: 'string' } } });
const TOTAL = Number(values.inputs);
const SEED = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed);
/** Health is checked this often (and at the end): a crash shows up near the input that caused it. */
const HEALTH_EVERY = 250;

const mesh = await startMesh({ args: ['--no-agent'], config: FUZZ_MESH_CONFIG, env: { GPUMESH_LOG_LEVEL: 'warn' } });
let failed = true;
try {
  const session = await FuzzSession.open(mesh.url, mesh.admin);
  const targets = session.targets();
  const perTarget = Math.ceil(TOTAL / targets.length);
  const health: string[] = [];
  const checkHealth = async (after: string): Promise<void> => {
    if (mesh.process.exitCode !== null || mesh.process.signalCode !== null) health.push(`the orchestrator exited (${mesh.process.exitCode ?? mesh.process.signalCode}) after ${after}`);
    else health.push(...(await session.healthProblems()).map((problem) => `${problem} (after ${after})`));
  };
  const started = performance.now();
  let sent = 0;
  for (const [index, target] of targets.entries()) {
    const inputs = fc.sample(target.inputs, { numRuns: perTarget, seed: SEED + index });
    for (const input of inputs) {
      await session.run(target, input);
      if (++sent % HEALTH_EVERY === 0) await checkHealth(`input ${sent} (${target.label})`);
      if (health.length > 0) break;
    }
    if (health.length > 0) break;
  }
  await checkHealth('the last input');
  const seconds = (performance.now() - started) / 1000;
  session.close();

  const rows = session.tally.rows();
  printTable(`Fuzzing: ${session.tally.inputs} inputs, seed ${SEED}`, ['target', 'inputs', 'statuses seen', 'failures', 'ms/input'],
    rows.map((row) => [row.label, String(row.inputs), Object.keys(row.seen).sort().join(' '), String(row.failures), row.milliseconds / row.inputs]));
  for (const row of rows) {
    for (const example of row.examples) process.stdout.write(`\nFAIL ${row.label}\n  sent: ${example.input}\n  ${example.problems.join('\n  ')}\n`);
  }
  for (const problem of health) process.stdout.write(`\nHEALTH ${problem}\n`);
  const failures = session.tally.failures;
  const summary = `fuzz: ${session.tally.inputs} inputs over ${rows.length} targets in ${seconds.toFixed(1)} s (${(session.tally.inputs / seconds).toFixed(0)}/s), seed ${SEED}: `
    + `${failures} failures, orchestrator ${health.length === 0 ? 'up and healthy' : 'NOT healthy'}; ${session.outputsChecked.size} published outputs served safely checked`;
  const path = writeResults('fuzz', { seed: SEED, inputs: session.tally.inputs, seconds, failures, health, summary, rows });
  process.stdout.write(`\n${summary}\nwrote ${path}\n`);
  failed = failures > 0 || health.length > 0;
} finally {
  await mesh.stop();
  if (!failed) removeDir(mesh.data);
  else process.stdout.write(`the orchestrator's data and logs are kept in ${mesh.data}\n`);
}
process.exitCode = failed ? 1 : 0;
