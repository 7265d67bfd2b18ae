/**
 * Wake-on-LAN over a real network: run by `scripts/netns-mesh.sh --hosts nas,west --driver scripts/netns/wake.ts` (as
 * root; `npm run netns:wake`) inside the `nas` namespace, which runs `gpumesh serve` with its packets going to the
 * network's broadcast address (10.77.255.255, port 9).
 *
 * Steps: (1) west's agent joins, announcing its MAC address (host config `wake.announce`); (2) west goes to sleep:
 * its agent leaves, and a listener in its namespace (wake-listener.mjs) stands in for its network card; (3) a job for
 * west's class waits: the orchestrator broadcasts a magic packet for west's MAC, the listener receives it and starts
 * west's agent, and the job completes there. Prints each step's result; exits 0 only if all held.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { MeshClient } from '../../src/cli/common/client.js';
import { gpumeshArgs } from '../../src/cli/common/launch.js';
import { spawnLogged, until, type MeshProcess } from './mesh.js';
import { Topology } from './topology.js';

const topology = Topology.fromEnv();
const PORT = 7070;
const url = `http://${topology.host('nas').address}:${PORT}`;
const logs = join(topology.work, 'logs');
const failures: string[] = [];
const check = (what: string, ok: boolean, detail = ''): void => {
  if (!ok) failures.push(`${what}${detail ? ` (${detail})` : ''}`);
  process.stdout.write(`  ${ok ? 'ok  ' : 'FAIL'} ${what}${detail ? `: ${detail}` : ''}\n`);
};
const procs: MeshProcess[] = [];

try {
  const data = join(topology.work, 'nas');
  mkdirSync(data, { recursive: true });
  writeFileSync(join(data, 'mesh.yaml'), stringify({
    server: { host: '0.0.0.0', port: PORT, publicUrl: url },
    wake: { broadcast: '10.77.255.255', port: 9, everyS: 2 },
  }));
  procs.push(spawnLogged(topology.command('nas', [process.execPath, ...gpumeshArgs(['serve', '--data', data])]), 'nas', logs));
  await until('the orchestrator to listen', async () => (await fetch(`${url}/healthz`).catch(() => null))?.ok, 60_000);
  const client = new MeshClient(url, readFileSync(join(data, 'admin.grant'), 'utf8').trim());
  const { token } = await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'west', classes: ['tensor'] });
  const westData = join(topology.work, 'west');
  mkdirSync(westData, { recursive: true });
  writeFileSync(join(westData, 'host.yaml'), stringify({ wake: { announce: true } }));
  const agentArgv = [process.execPath, ...gpumeshArgs(['agent', '--join', url, '--grant', token, '--data', westData])];
  const connected = async (): Promise<boolean> => (await client.request<{ hosts: { id: string; connected: boolean }[] }>('GET', '/v1/hosts')).hosts.some((host) => host.id === 'west' && host.connected);

  process.stdout.write('step 1: west joins, announcing its MAC address\n');
  const first = spawnLogged(topology.command('west', agentArgv), 'west-1', logs);
  procs.push(first);
  await until('west to join', connected, 60_000);
  check('west joined', true);

  process.stdout.write('step 2: west goes to sleep (its agent leaves; its network card listens)\n');
  await first.kill('SIGTERM');
  await until('west to leave', async () => !(await connected()), 30_000);
  const listener = spawnLogged(topology.command('west', [process.execPath, join(import.meta.dirname, 'wake-listener.mjs'), '--', ...agentArgv]), 'west-listener', logs);
  procs.push(listener);
  check('west left the mesh', true);

  process.stdout.write('step 3: a job for west\'s class waits; the orchestrator wakes west; the job runs there\n');
  const started = Date.now();
  const { id } = await client.submit({ type: 'tensor', model: 'mlp', input: { x: Array.from({ length: 64 }, (_, k) => Math.sin(k)) } });
  const job = await until('the job to run on the woken west', async () => {
    const view = await client.request<{ status: string; attempts: { host: string }[] }>('GET', `/v1/jobs/${id}`);
    return view.status === 'succeeded' || view.status === 'failed' ? view : null;
  }, 90_000);
  check('the job succeeded on west', job.status === 'succeeded' && job.attempts.at(-1)?.host === 'west', `${job.status} after ${Date.now() - started} ms`);
  const audit = await client.request<{ entries: { detail: string }[] }>('GET', '/v1/audit?event=host:woken');
  check('the audit log says west was sent a packet', audit.entries.some((entry) => entry.detail.startsWith('sent west a Wake-on-LAN packet')), audit.entries[0]?.detail ?? 'no entry');
} finally {
  for (const proc of procs.reverse()) await proc.kill('SIGKILL').catch(() => {});
}

if (failures.length > 0) {
  process.stdout.write(`\n${failures.length} check(s) failed:\n  ${failures.join('\n  ')}\n`);
  process.exit(1);
}
process.stdout.write('\nall 3 steps held\n');
