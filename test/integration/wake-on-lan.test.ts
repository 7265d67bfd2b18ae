import { createSocket, type Socket } from 'node:dgram';
import { once } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { macAddresses } from '../../src/agent/host-policy/mac-addresses.js';
import { MeshClient } from '../../src/cli/common/client.js';
import type { HostView } from '../../src/protocol/api/index.js';
import { magicPacket } from '../../src/orchestrator/wake/magic-packet.js';
import { removeDir, ROOT, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, startServe, type Proc } from '../helpers/processes.js';

/**
 * Sleep and Wake-on-LAN through real processes: a `gpumesh serve` whose packets go to a UDP port on loopback, where a
 * listener stands in for the sleeping machine's network card, and an agent whose sleep policy runs a stand-in sleep
 * command (test/fixtures/sleep-until.mjs) that returns when the "card" hears its magic packet. (Over a network, between
 * namespaces, with a machine whose agent stops and starts again: `npm run netns:wake`.)
 */
const data = tempDir('gpumesh-wake-');
const processes: Proc[] = [];
let url: string;
let client: MeshClient;
let nic: Socket;
let grant: string;
const packets: Buffer[] = [];

const agentDir = join(data, 'west');
/** The stand-in sleep command returns once this file appears (the network card heard the magic packet). */
const wakeMarker = join(data, 'woken');
const startWest = (): Proc => {
  const agent = gpumesh(['agent', '--join', url, '--grant', grant, '--data', agentDir]);
  processes.push(agent);
  return agent;
};
const host = async (id: string): Promise<HostView | undefined> => (await client.request<{ hosts: HostView[] }>('GET', '/v1/hosts')).hosts.find((entry) => entry.id === id);

beforeAll(async () => {
  if (macAddresses().length === 0) throw new Error('this machine has no network interface with a MAC address to announce (only loopback)');
  nic = createSocket('udp4');
  nic.bind(0, '127.0.0.1');
  await once(nic, 'listening');
  writeFileSync(join(data, 'mesh.yaml'), stringify({ wake: { broadcast: '127.0.0.1', port: nic.address().port, everyS: 1 } }));
  const served = await startServe(data);
  processes.push(served.proc);
  url = served.url;
  client = new MeshClient(url, served.admin);
  grant = (await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'west', classes: ['image'] })).token;
  mkdirSync(agentDir, { recursive: true });
  writeFileSync(join(agentDir, 'host.yaml'), stringify({
    wake: { announce: true },
    sleep: { afterIdleS: 1, command: [process.execPath, join(ROOT, 'test/fixtures/sleep-until.mjs'), wakeMarker] },
  }));
}, 120_000);

afterAll(async () => {
  nic?.close();
  for (const proc of processes.reverse()) await proc.kill();
  removeDir(data);
});

describe('Wake-on-LAN', () => {
  it('an idle host says it sleeps and sleeps; work for its class sends it a magic packet; it wakes, and the work runs there', async () => {
    startWest();
    await waitFor(async () => (await host('west'))?.connected, { timeoutMs: 60_000, what: 'west to join' });
    // Idle for its afterIdleS: it says "asleep", leaves, and runs its sleep command; asleep, not lost.
    const asleep = await waitFor(async () => {
      const west = await host('west');
      return west && !west.connected ? west : null;
    }, { timeoutMs: 30_000, what: 'west to go to sleep' });
    expect(asleep.away?.state).toBe('asleep');
    expect(asleep.left).toBe(true);

    nic.on('message', (packet) => {
      packets.push(packet);
      writeFileSync(wakeMarker, 'woken');
    });
    const { id } = await client.submit({ type: 'image', input: { prompt: 'wake up', width: 32, height: 32, steps: 1 } });
    await waitFor(() => packets.length > 0, { timeoutMs: 15_000, what: 'a magic packet' });
    // Six 0xFF bytes, then one of west's MAC addresses sixteen times.
    expect(macAddresses().map((mac) => magicPacket(mac).toString('hex'))).toContain(packets[0]!.toString('hex'));
    expect(packets[0]!.length).toBe(102);
    const explained = await client.request<{ status: string; summary: string }>('GET', `/v1/jobs/${id}/explain`);
    if (explained.status === 'queued') expect(explained.summary).toMatch(/waking west, packet sent \d\d:\d\d UTC/);
    expect((await host('west'))?.wokenAt).toMatch(/^\d{4}-/);

    const done = await waitFor(async () => {
      const job = await client.request<{ status: string; attempts: { host: string }[] }>('GET', `/v1/jobs/${id}`);
      return job.status === 'succeeded' ? job : null;
    }, { timeoutMs: 60_000, what: 'the job to run on the woken host' });
    expect(done.attempts.at(-1)!.host).toBe('west');
    const audit = await client.request<{ entries: { event: string; detail: string }[] }>('GET', '/v1/audit?event=host:woken');
    expect(audit.entries[0]!.detail).toMatch(/^sent west a Wake-on-LAN packet \([0-9a-f:, ]+\) at 127\.0\.0\.1:\d+: work waits for it$/);
  });
});
