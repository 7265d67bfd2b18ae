import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import type { HostView } from '../../src/protocol/api/index.js';
import { removeDir, ROOT, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, startServe, type Proc } from '../helpers/processes.js';

/**
 * Hosts that are people's computers, through real processes: a `gpumesh serve` whose image jobs fall back to the
 * `cloud` class, and three real agents — `laptop`, with a GPU (the stand-in nvidia-smi of test/fixtures/nvidia, driven
 * by a scenario file this test rewrites: no GPU here) whose host.yaml yields to its owner and keeps it cool;
 * `nightbox`, whose hours are closed now; and `fallback`, of the `cloud` class.
 */
const data = tempDir('gpumesh-host-policies-');
const driver = join(data, 'driver');
const scenarioFile = join(data, 'gpu-scenario.json');
const processes: Proc[] = [];
let url: string;
let client: MeshClient;

const GPU = { index: 0, uuid: 'GPU-stand-in-0', name: 'Stand-in RTX 5080 Laptop', memoryTotalMB: 16303, memoryUsedMB: 300, temperatureC: 55, powerW: 40, powerLimitW: 175 };
function scenario(gpu: Partial<typeof GPU> = {}, apps: { gpu: number; pid: number; name: string; usedMB: number }[] = []): void {
  writeFileSync(scenarioFile, JSON.stringify({ gpus: [{ ...GPU, ...gpu }], processes: apps }));
}

/** A closed window of a minute, twelve hours from now (UTC): the host is out of hours for the whole test. */
function closedWindow(): string {
  const at = new Date(Date.now() + 12 * 3600_000);
  const hhmm = (date: Date): string => `${String(date.getUTCHours()).padStart(2, '0')}:${String(date.getUTCMinutes()).padStart(2, '0')}`;
  return `${hhmm(at)}-${hhmm(new Date(at.getTime() + 60_000))}`;
}

async function host(id: string): Promise<HostView | undefined> {
  return (await client.request<{ hosts: HostView[] }>('GET', '/v1/hosts')).hosts.find((entry) => entry.id === id);
}

async function joinHost(id: string, classes: string[], hostConfig: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): Promise<void> {
  const { token } = await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: id, classes });
  const dir = join(data, 'agents', id);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'host.yaml'), stringify(hostConfig));
  processes.push(gpumesh(['agent', '--join', url, '--grant', token, '--data', dir], env));
  await waitFor(async () => (await host(id))?.connected, { timeoutMs: 60_000, what: `${id} to join` });
}

/** Run one small picture to the end; the hosts its attempts ran on, and the route of its last. */
async function picture(prompt: string): Promise<{ host: string; skipped: { host: string; reason: string }[] }> {
  const job = await client.send<{ id: string; status: string; attempts: { host: string; route: { skipped: { host: string; reason: string }[] } | null }[] }>(
    'POST', '/v1/jobs', JSON.stringify({ type: 'image', input: { prompt, width: 32, height: 32, steps: 1 } }), { 'content-type': 'application/json', prefer: 'wait=60' },
  );
  expect(job.status).toBe('succeeded');
  const last = job.attempts.at(-1)!;
  return { host: last.host, skipped: last.route?.skipped ?? [] };
}

beforeAll(async () => {
  mkdirSync(driver);
  symlinkSync(join(ROOT, 'test/fixtures/nvidia/nvidia-smi.mjs'), join(driver, 'nvidia-smi'));
  scenario();
  writeFileSync(join(data, 'mesh.yaml'), stringify({ routing: { image: ['image', 'cloud'] } }));
  const served = await startServe(data);
  processes.push(served.proc);
  url = served.url;
  client = new MeshClient(url, served.admin);
  await joinHost('fallback', ['cloud'], {});
  await joinHost('nightbox', ['image'], { hours: { available: [closedWindow()], timeZone: 'UTC' } });
  await joinHost('laptop', ['image'], {
    owner: { gpuMemoryMB: 1024, checkEveryS: 1, unloadWithinS: 2, quietS: 2 },
    cool: { temperatureC: 85, marginC: 5 },
  }, { PATH: `${driver}:${process.env.PATH}`, FAKE_NVIDIA_SMI_SCENARIO: scenarioFile });
}, 180_000);

afterAll(async () => {
  for (const proc of processes.reverse()) await proc.kill();
  removeDir(data);
});

describe('hosts that are people\'s computers', () => {
  it('a host out of its hours takes nothing, says until when, and explain names it', async () => {
    const nightbox = await host('nightbox');
    expect(nightbox?.away).toMatchObject({ state: 'off-hours', reason: expect.stringMatching(/^out of hours until \w{3} \d\d:\d\d \(UTC\)$/) });
    expect(Date.parse(nightbox!.away!.until!)).toBeGreaterThan(Date.now() + 11 * 3600_000);
    // The laptop takes the picture; the night box was passed over for its hours.
    const ran = await picture('a lighthouse');
    expect(ran.host).toBe('laptop');
    expect(ran.skipped).toContainEqual({ host: 'nightbox', reason: 'out of hours' });
    const status = await gpumeshRun(['status', '--data', data]);
    expect(status.stdout).toMatch(/nightbox\s+off-hours since \d\d:\d\d: out of hours until/);
    // A job whose grant allows the night box alone waits for it, and explain says until when.
    const { token } = await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'client', types: ['image'], hosts: ['nightbox'] });
    const waiting = new MeshClient(url, token);
    // Its queued event says what it waits for (read from the mesh's event stream, open before it is submitted).
    const stream = await fetch(`${url}/v1/events?types=queued`, { headers: { authorization: `Bearer ${readFileSync(join(data, 'admin.grant'), 'utf8').trim()}` } });
    const { id } = await waiting.submit({ type: 'image', input: { prompt: 'at night', width: 32, height: 32, steps: 1 } });
    const reader = stream.body!.getReader();
    let text = '';
    const queued = await waitFor(async () => {
      const { value } = await reader.read();
      text += Buffer.from(value ?? new Uint8Array()).toString();
      const event = text.split('\n').filter((line) => line.startsWith('data: ')).map((line) => JSON.parse(line.slice(6)) as { jobId: string; waitsFor?: string }).find((entry) => entry.jobId === id);
      return event ?? null;
    }, { timeoutMs: 10_000, what: 'the job\'s queued event' });
    await reader.cancel();
    expect(queued.waitsFor).toMatch(/^nightbox: out of hours until \w{3} \d\d:\d\d \(UTC\)$/);
    const explained = await client.request<{ summary: string; waiting: { hosts: { host: string; reason: string | null; detail: string | null }[] } }>('GET', `/v1/jobs/${id}/explain`);
    expect(explained.summary).toMatch(/^waiting for a host of its classes: no usable host serves image or cloud \(.*nightbox: out of hours \(out of hours until \w{3} \d\d:\d\d \(UTC\); back by \d{4}-/);
    expect(explained.waiting.hosts).toContainEqual(expect.objectContaining({ host: 'nightbox', reason: 'out of hours', detail: expect.stringContaining('back by') }));
    await client.request('DELETE', `/v1/jobs/${id}`);
    // One whose deadline comes before the night box opens is refused at submit, naming when it opens.
    const refused = await fetch(`${url}/v1/jobs`, {
      method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'image', timeoutMs: 60_000, input: { prompt: 'tonight, please', width: 32, height: 32, steps: 1 } }),
    });
    expect(refused.status).toBe(422);
    const { error } = await refused.json() as { error: { code: string; message: string } };
    expect(error.code).toBe('DEADLINE_UNREACHABLE');
    expect(error.message).toMatch(/^No host that could run the job opens before its deadline \(\d{4}-.*\): nightbox: out of hours until \w{3} \d\d:\d\d \(UTC\)$/);
  });

  it('the laptop\'s GPU is reported with its temperature and power, and each result with the energy it took', async () => {
    await waitFor(async () => (await host('laptop'))?.devices[0]?.temperatureC === 55, { timeoutMs: 15_000, what: 'a heartbeat with the GPU\'s temperature' });
    expect((await host('laptop'))!.devices[0]).toMatchObject({ id: 'gpu0', kind: 'gpu', temperatureC: 55, powerW: 40, powerLimitW: 175 });
    // 40 W over the batch's run, shared out to its one job.
    const job = await client.send<{ id: string; attempts: { host: string }[]; artifacts: { energyWh: number | null; computeMs: number }[] }>(
      'POST', '/v1/jobs', JSON.stringify({ type: 'image', input: { prompt: 'how much did this cost', width: 64, height: 64, steps: 2 } }), { 'content-type': 'application/json', prefer: 'wait=60' },
    );
    expect(job.attempts.at(-1)!.host).toBe('laptop');
    const [artifact] = job.artifacts;
    expect(artifact!.energyWh).toBeGreaterThan(0);
    // Power × time, within the agent's own measure of the batch (it reads the meter around the engine's run).
    expect(artifact!.energyWh! * 3600).toBeLessThanOrEqual(40 * (artifact!.computeMs / 1000) * 1.5 + 0.5);
    const status = await client.request<{ energy: { byModel: Record<string, number>; byHost: Record<string, number> } }>('GET', '/v1/status');
    expect(status.energy.byHost.laptop).toBeGreaterThan(0);
    expect(status.energy.byModel.gen).toBeGreaterThan(0);
    expect(status.energy.byHost.nightbox).toBeUndefined();
    const text = await gpumeshRun(['status', '--data', data]);
    expect(text.stdout).toMatch(/^energy: models gen \S+ Wh; hosts laptop \S+ Wh \(since the orchestrator started\)$/m);
    const metrics = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${readFileSync(join(data, 'admin.grant'), 'utf8').trim()}` } })).text();
    expect(metrics).toMatch(/^gpumesh_energy_joules_total\{model="gen",host="laptop"\} [\d.e-]+$/m);
  });

  it('a game takes 6 GB of the GPU: the laptop yields, unloads its models, jobs run on the fallback host; it is back after the quiet period', async () => {
    expect((await host('laptop'))!.resident.length).toBeGreaterThan(0);
    scenario({}, [{ gpu: 0, pid: 4242, name: 'game.exe', usedMB: 6200 }]);
    const yielded = await waitFor(async () => {
      const laptop = await host('laptop');
      return laptop?.away?.state === 'yielded' && laptop.resident.length === 0 ? laptop : null;
    }, { timeoutMs: 15_000, what: 'the laptop to yield and unload' });
    expect(yielded.away!.reason).toBe('game.exe holds 6.1 GB on gpu0');
    const meanwhile = await picture('while the owner plays');
    expect(meanwhile.host).toBe('fallback');
    expect(meanwhile.skipped).toContainEqual({ host: 'laptop', reason: 'yielded' });
    const status = await gpumeshRun(['status', '--data', data]);
    expect(status.stdout).toMatch(/laptop\s+yielded since \d\d:\d\d: game\.exe holds 6\.1 GB on gpu0/);

    scenario();
    await waitFor(async () => (await host('laptop'))?.away === null, { timeoutMs: 15_000, what: 'the laptop to come back after its quiet period' });
    expect((await picture('after the game')).host).toBe('laptop');
  });

  it('a GPU at 90 °C takes nothing until it is 5 °C below its limit', async () => {
    scenario({ temperatureC: 90 });
    const hot = await waitFor(async () => ((await host('laptop'))?.away?.state === 'hot' ? host('laptop') : null), { timeoutMs: 15_000, what: 'the laptop to be too hot' });
    expect(hot!.away!.reason).toBe('gpu0 at 90 °C (limit 85)');
    expect((await picture('while it cools')).host).toBe('fallback');
    scenario({ temperatureC: 82 });
    // Below the limit, not yet below the margin: still hot (it was over).
    await waitFor(async () => (await host('laptop'))?.away?.reason === 'gpu0 at 82 °C (limit 85)', { timeoutMs: 15_000, what: 'the reading to reach 82 °C' });
    scenario({ temperatureC: 79 });
    await waitFor(async () => (await host('laptop'))?.away === null, { timeoutMs: 15_000, what: 'the laptop to have cooled' });
    expect((await picture('cool again')).host).toBe('laptop');
  });
});
