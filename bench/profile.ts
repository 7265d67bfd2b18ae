/**
 * CPU profiles of the orchestrator and the agent under the overhead benchmark's
 * load (one tiny job at a time, gen 8×8 and mlp), turned into flame graphs
 * under bench/profiles/ and a table of the heaviest functions of each process.
 *
 *   npm run bench:profile -- [--jobs 2000] [--type both|gen|mlp] [--out bench/profiles]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { MLP_INPUT_DIM } from '../src/models/index.js';
import { BIN, removeDir, tempDir, waitFor } from '../test/helpers/mesh.js';
import { freePort, waitHealthy } from '../test/helpers/processes.js';
import { callTree, flameSvg, heaviest } from './flame.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '2000' }, type: { type: 'string', default: 'both' }, out: { type: 'string', default: 'bench/profiles' } } });
const JOBS = Number(values.jobs);
const OUT = values.out!;

function profiled(name: string, dir: string, args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  mkdirSync(join(dir, name), { recursive: true });
  return spawn(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${join(dir, name)}`, '--cpu-prof-interval=250', BIN, ...args], {
    env: { ...process.env, GPUMESH_LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'ignore', 'inherit'],
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGINT'); // a clean exit writes the profile
  await exited;
}

const data = tempDir('gpumesh-profile-');
const raw = join(data, 'profiles');
const port = await freePort();
const url = `http://127.0.0.1:${port}`;
const orchestrator = profiled('orchestrator', raw, ['serve', '--data', data, '--port', String(port)]);
await waitHealthy(url);
const admin = readFileSync(join(data, 'admin.grant'), 'utf8').trim();
const client = new BenchClient(url, admin, 4);
const minted = JSON.parse((await client.request('POST', '/v1/grants', JSON.stringify({ kind: 'agent', host: 'profiled', classes: ['image', 'tensor'] }))).text) as { token: string };
const agent = profiled('agent', raw, ['agent', '--url', url, '--host', 'profiled', '--classes', 'image,tensor', '--data', join(data, 'agent')], { GPUMESH_GRANT: minted.token });
await waitFor(async () => (await fetch(`${url}/readyz`)).ok, { what: 'the agent to join' });
await client.listen();
const jobs = {
  gen: { type: 'image', input: { prompt: 'profile', seed: 1, width: 8, height: 8, steps: 1 } },
  mlp: { type: 'tensor', input: { x: Array.from({ length: MLP_INPUT_DIM }, (_, k) => Math.sin(k)) } },
};
const kinds = values.type === 'both' ? (['gen', 'mlp'] as const) : [values.type as 'gen' | 'mlp'];
for (const kind of kinds) for (let i = 0; i < 100; i++) await client.run(jobs[kind]);
const started = performance.now();
for (const kind of kinds) for (let i = 0; i < JOBS; i++) await client.run(jobs[kind]);
const seconds = (performance.now() - started) / 1000;
client.close();
await stop(agent);
await stop(orchestrator);

mkdirSync(OUT, { recursive: true });
for (const name of ['orchestrator', 'agent']) {
  const file = readdirSync(join(raw, name)).find((entry) => entry.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no profile from the ${name}`);
  const root = callTree(JSON.parse(readFileSync(join(raw, name, file), 'utf8')));
  const title = `${name}: ${kinds.join(' + ')} jobs one at a time, ${JOBS} each after 100 warm-up (${seconds.toFixed(1)} s)`;
  writeFileSync(join(OUT, `${name}.svg`), flameSvg(root, title));
  process.stdout.write(`\n${title}\n`);
  for (const row of heaviest(root, 18)) process.stdout.write(`${row.pct.toFixed(1).padStart(5)}%  ${row.selfMs.toFixed(0).padStart(7)} ms  ${row.name}\n`);
}
process.stdout.write(`\nflame graphs in ${OUT}/orchestrator.svg and ${OUT}/agent.svg\n`);
rmSync(raw, { recursive: true, force: true });
removeDir(data);
