/**
 * Two NAS boxes over a real network: run by `scripts/netns-mesh.sh --hosts db,nas1,nas2,laptop --driver
 * scripts/netns/second-nas.ts` (as root; `npm run netns:second-nas`) inside the `db` namespace, which runs PostgreSQL
 * (a throwaway cluster, test/helpers/postgres.ts). nas1 and nas2 each run `gpumesh serve` on that database; the
 * laptop runs an agent joined with both URLs; this driver is the client, with both URLs too.
 *
 * Steps: (1) nas1 runs the mesh, nas2 stands by; (2) nas1's cable is pulled while jobs stream in: nas2 takes the
 * mesh over, the agent and the client ride through to it, and every job accepted completes exactly once; (3) the
 * cable is put back: nas1, which still believed it ran the mesh, finds its lease gone (its writes are refused by the
 * database) and stops (exit 75) rather than run a second mesh. Prints each step's result; exits 0 only if all held.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { writeFileSync, mkdirSync } from 'node:fs';
import { MeshClient } from '../../src/cli/common/client.js';
import { gpumeshArgs } from '../../src/cli/common/launch.js';
import { startPostgres } from '../../test/helpers/postgres.js';
import { orchestratorRole as role } from '../../test/helpers/processes.js';
import { sleep, spawnLogged, until, within, type MeshProcess } from './mesh.js';
import { Topology } from './topology.js';

const topology = Topology.fromEnv();
const PORT = 7070;
const LEASE_MS = 2000;
const db = topology.host('db');
const urls = ['nas1', 'nas2'].map((name) => `http://${topology.host(name).address}:${PORT}`);
const logs = join(topology.work, 'logs');
const failures: string[] = [];
let step = 0;

function check(what: string, ok: boolean, detail = ''): void {
  if (!ok) failures.push(`step ${step}: ${what}${detail ? ` (${detail})` : ''}`);
  process.stdout.write(`  ${ok ? 'ok  ' : 'FAIL'} ${what}${detail ? `: ${detail}` : ''}\n`);
}


const postgres = await startPostgres({ also: { listen: db.address, allow: '10.77.0.0/16' } });
const procs: MeshProcess[] = [];
try {
  const databaseUrl = `postgres://gpumesh@${db.address}:${postgres.port}/gpumesh`;
  const serve = (name: string): MeshProcess => {
    const data = join(topology.work, name);
    mkdirSync(data, { recursive: true });
    writeFileSync(join(data, 'mesh.yaml'), stringify({
      server: { host: '0.0.0.0', port: PORT, publicUrl: `http://${topology.host(name).address}:${PORT}` },
      store: { kind: 'postgres', url: databaseUrl, leaseMs: LEASE_MS },
      agents: { heartbeatMs: 400, staleAfterMs: 2000, reconnectGraceMs: 5000 },
    }));
    const proc = spawnLogged(topology.command(name, [process.execPath, ...gpumeshArgs(['serve', '--data', data])]), name, logs);
    procs.push(proc);
    return proc;
  };

  step = 1;
  process.stdout.write('step 1: nas1 runs the mesh on PostgreSQL (in db), nas2 stands by, the laptop joins with both URLs\n');
  const nas1 = serve('nas1');
  await until('nas1 to run the mesh', async () => (await role(urls[0]!)) === 'active', 60_000);
  serve('nas2');
  await until('nas2 to stand by', async () => (await role(urls[1]!)) === 'standby', 60_000);
  const admin = readFileSync(join(topology.work, 'nas1', 'admin.grant'), 'utf8').trim();
  const client = new MeshClient(urls, admin);
  const { token } = await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'laptop', classes: ['tensor'] });
  procs.push(spawnLogged(topology.command('laptop', [process.execPath, ...gpumeshArgs([
    'agent', '--join', urls.join(','), '--grant', token, '--data', join(topology.work, 'laptop'),
  ])]), 'laptop', logs));
  await until('the laptop to join nas1', async () => (await fetch(`${urls[0]}/readyz`)).ok, 60_000);
  const status = await client.request<{ orchestrators?: { url: string; role: string }[] }>('GET', '/v1/status');
  check('GET /v1/status lists nas1 active and nas2 standing by', JSON.stringify(status.orchestrators?.map((entry) => [entry.url, entry.role]).sort())
    === JSON.stringify([[urls[0], 'active'], [urls[1], 'standby']]), JSON.stringify(status.orchestrators));

  step = 2;
  process.stdout.write('step 2: nas1\'s cable is pulled while jobs stream in\n');
  const accepted = new Map<string, string>();
  let refused = 0;
  let streaming = true;
  const stream = (async () => {
    for (let n = 0; streaming; n++) {
      const key = `second-nas-${n}`;
      for (;;) {
        try {
          // To the orchestrator that says it runs the mesh, and given up after 5 s: a request on a pulled cable
          // hears nothing at all (no reset), for as long as TCP keeps trying.
          const active = (await Promise.all(urls.map(role))).indexOf('active');
          if (active < 0) throw new Error('no orchestrator runs the mesh');
          const submitting = new MeshClient(urls[active]!, admin).submit({ type: 'tensor', model: 'mlp', idempotencyKey: key, input: { x: Array.from({ length: 64 }, (_, k) => Math.sin(n + k)) } });
          submitting.catch(() => {});
          const job = await within(submitting, 5000, () => { throw new Error('no answer in 5 s'); });
          accepted.set(key, job.id);
          break;
        } catch {
          // No orchestrator reachable and active for a moment: sent again, with the same key.
          refused++;
          if (!streaming) break;
          await sleep(200);
        }
      }
      await sleep(50);
    }
  })();
  await sleep(2000);
  const cutAt = Date.now();
  await topology.cut('nas1');
  await until('nas2 to take the mesh over', async () => (await role(urls[1]!)) === 'active', 30_000);
  const tookOverMs = Date.now() - cutAt;
  await until('the laptop to join nas2', async () => (await fetch(`${urls[1]}/readyz`)).ok, 30_000);
  const relinkedMs = Date.now() - cutAt;
  await sleep(3000);
  streaming = false;
  await stream;
  check('nas2 took the mesh over', true, `${tookOverMs} ms after the cut; the laptop linked to it ${relinkedMs} ms after`);
  const ended = await until('every accepted job to end', async () => {
    const rows = await postgres.query<{ status: string; n: number }>('SELECT status, COUNT(*)::int AS n FROM jobs WHERE id = ANY($1) GROUP BY status', [[...accepted.values()]]);
    const counts = Object.fromEntries(rows.map((row) => [row.status, row.n]));
    return (counts.succeeded ?? 0) + (counts.failed ?? 0) === accepted.size ? counts : null;
  }, 60_000);
  check(`every accepted job succeeded (${accepted.size}, ${refused} submits sent again)`, ended.succeeded === accepted.size, JSON.stringify(ended));
  const [keys] = await postgres.query<{ n: number }>("SELECT COUNT(*)::int AS n FROM jobs WHERE idempotency_key LIKE 'second-nas-%'");
  check('each job once: one row per key', keys!.n === accepted.size, `${keys!.n} rows for ${accepted.size} keys`);

  step = 3;
  process.stdout.write('step 3: the cable is put back; nas1 finds its lease gone and stops\n');
  await topology.restore('nas1');
  const code = await within(nas1.exited, 30_000, () => 'still running');
  check('nas1 stopped with exit code 75 (the lease is no longer its own)', code === 75, `exit ${String(code)}`);
  check('nas2 still runs the mesh', (await role(urls[1]!)) === 'active');
} finally {
  for (const proc of procs.reverse()) await proc.kill('SIGKILL').catch(() => {});
  await postgres.stop();
}

if (failures.length > 0) {
  process.stdout.write(`\n${failures.length} check(s) failed:\n  ${failures.join('\n  ')}\n`);
  process.exit(1);
}
process.stdout.write('\nall 3 steps held\n');
