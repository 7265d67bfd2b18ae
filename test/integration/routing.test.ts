import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { writeFileSync } from 'node:fs';
import { MeshClient } from '../../src/cli/common/client.js';
import type { ExplainView, HostView } from '../../src/protocol/api/index.js';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';

/**
 * Routing across real hosts: `gpumesh serve` and two `gpumesh agent`
 * processes of different classes, with image jobs routed to `[image, cloud]`.
 * The laptop (class image) is preferred; when it goes away, jobs fall back to
 * the cloud box, and the route log and `gpumesh explain` say why.
 */
const data = tempDir('gpumesh-routing-');
let serve: Proc;
let url: string;
let admin: MeshClient;
const agents = new Map<string, Proc>();
let env: NodeJS.ProcessEnv;

async function startAgent(host: string, classes: string): Promise<void> {
  const { token } = await admin.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host, classes: classes.split(',') });
  agents.set(host, gpumesh(['agent', '--url', url, '--host', host, '--classes', classes, '--data', join(data, `agent-${host}`), '--cpu-budget', '512'], { GPUMESH_GRANT: token }));
}

const hostsNow = async (): Promise<HostView[]> => (await admin.request<{ hosts: HostView[] }>('GET', '/v1/hosts')).hosts;

beforeAll(async () => {
  writeFileSync(join(data, 'mesh.yaml'), stringify({ routing: { image: ['image', 'cloud'], tensor: ['tensor'] }, health: { probeIntervalMs: 1000 } }));
  serve = gpumesh(['serve', '--data', data, '--port', '0']);
  const urlFile = join(data, 'orchestrator.url');
  await waitFor(() => {
    if (serve.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${serve.output()}`);
    return existsSync(urlFile) && existsSync(join(data, 'admin.grant'));
  }, { timeoutMs: 60_000, what: 'gpumesh serve to listen' });
  url = readFileSync(urlFile, 'utf8').trim();
  await waitHealthy(url);
  admin = new MeshClient(url, readFileSync(join(data, 'admin.grant'), 'utf8').trim());
  env = { GPUMESH_HOME: data, GPUMESH_URL: url };
  await startAgent('laptop', 'image');
  await startAgent('cloudbox', 'cloud');
  await waitFor(async () => (await hostsNow()).filter((host) => host.connected).length === 2, { timeoutMs: 60_000, what: 'both agents to join' });
});

afterAll(async () => {
  for (const agent of agents.values()) await agent.kill();
  await serve?.kill();
  removeDir(data);
});

const small = (prompt: string) => ({ type: 'image', input: { prompt, width: 8, height: 8, steps: 1 } });

describe('routing with fallback across real agents', () => {
  it('runs image jobs on the first class while it has a usable replica', async () => {
    const { id } = await admin.submit(small('on the laptop'));
    expect((await admin.follow(id)).type).toBe('succeeded');
    const [attempt] = (await admin.job(id)).attempts;
    expect(attempt).toMatchObject({ host: 'laptop', status: 'succeeded', route: { host: 'laptop', class: 'image' } });
  });

  it('falls back to the second class when the first has no usable replica, and says why', async () => {
    await agents.get('laptop')!.kill();
    await waitFor(async () => (await hostsNow()).some((host) => host.id === 'laptop' && !host.connected), { timeoutMs: 20_000, what: 'the laptop to leave' });
    const { id } = await admin.submit(small('on the cloud box'));
    expect((await admin.follow(id)).type).toBe('succeeded');
    const [attempt] = (await admin.job(id)).attempts;
    expect(attempt).toMatchObject({ host: 'cloudbox', route: { host: 'cloudbox', class: 'cloud', skipped: [{ host: 'laptop', reason: 'disconnected' }] } });

    const explained = await gpumeshRun(['explain', id], env);
    expect(explained.code, explained.output).toBe(0);
    expect(explained.output).toContain('succeeded after 1 attempt');
    expect(explained.output).toContain('may run on: classes image → cloud');
    expect(explained.output).toMatch(/1\s+cloudbox\s+succeeded\s+-\s+cloudbox \(cloud, \w+\); passed over: laptop \(disconnected\)/);

    const hosts = await hostsNow();
    expect(hosts.find((host) => host.id === 'laptop')).toMatchObject({ connected: false, health: 'disconnected', lostAt: expect.any(String) });
    expect(hosts.find((host) => host.id === 'cloudbox')!.replicas.find((replica) => replica.model === 'gen')).toMatchObject({ resident: true, samples: 1 });
  });

  it('a real agent answers health probes: one job of the probe input through its engine, no outputs delivered', async () => {
    const probed = await waitFor(async () => {
      const replica = (await hostsNow()).find((host) => host.id === 'cloudbox')!.replicas.find((entry) => entry.model === 'gen')!;
      return replica.lastProbeAt ? replica : null;
    }, { timeoutMs: 15_000, what: 'a probe of cloudbox/gen' });
    expect(probed).toMatchObject({ health: 'healthy', healthDetail: null, breaker: { state: 'closed' } });
    const metrics = new TextDecoder().decode(await admin.download('/metrics'));
    expect(metrics).toMatch(/gpumesh_probes_total\{host="cloudbox",model="gen",outcome="ok"\} [1-9]/);
    expect(metrics).not.toMatch(/gpumesh_probes_total\{host="cloudbox",model="gen",outcome="(failed|timeout)"\}/);
    // Probes are not jobs: none is listed, and no artifact was published for one.
    const { jobs } = await admin.request<{ jobs: { id: string }[] }>('GET', '/v1/jobs?limit=200');
    expect(jobs.every((job) => job.id.startsWith('j_'))).toBe(true);
    const { artifacts } = await admin.request<{ artifacts: { jobId: string }[] }>('GET', '/v1/artifacts?limit=200');
    expect(artifacts.every((artifact) => artifact.jobId.startsWith('j_'))).toBe(true);
  });

  it('explain answers why a queued job still waits: its place, what it waits for, each host and why not', async () => {
    // A grant whose jobs may run only on the laptop, which is gone.
    const { token } = await admin.request<{ token: string }>('POST', '/v1/grants', { kind: 'client', hosts: ['laptop'] });
    const client = new MeshClient(url, token);
    const first = await client.submit(small('waits for the laptop'));
    const second = await client.submit(small('waits behind it'));
    const view = await client.request<ExplainView>('GET', `/v1/jobs/${second.id}/explain`);
    expect(view).toMatchObject({ status: 'queued', classes: ['image', 'cloud'], hosts: ['laptop'] });
    expect(view.waiting).toMatchObject({ for: 'a host of its classes', position: { ahead: 1, queued: 2 } });
    expect(view.waiting!.hosts).toEqual(expect.arrayContaining([
      expect.objectContaining({ host: 'laptop', class: 'image', canTake: false, reason: 'disconnected' }),
      expect.objectContaining({ host: 'cloudbox', class: 'cloud', canTake: false, reason: 'host not granted' }),
    ]));
    const printed = await gpumeshRun(['explain', first.id, '--grant', token], env);
    expect(printed.code, printed.output).toBe(0);
    expect(printed.output).toContain('waiting for a host of its classes: no usable host serves image or cloud (laptop: disconnected; cloudbox: host not granted)');
    expect(printed.output).toContain('position: 0 ahead of it, 2 queued for gen');
    expect(printed.output).toMatch(/cloudbox\s+cloud\s+no\s+host not granted/);

    // The laptop comes back: the waiting jobs run there.
    await startAgent('laptop', 'image');
    for (const job of [first, second]) expect((await client.follow(job.id)).type).toBe('succeeded');
    expect((await client.job(second.id)).attempts[0]).toMatchObject({ host: 'laptop', route: { class: 'image' } });

    // Explain follows the job's visibility: a grant that may not see the job gets 404.
    const { token: tensorOnly } = await admin.request<{ token: string }>('POST', '/v1/grants', { kind: 'client', types: ['tensor'] });
    await expect(new MeshClient(url, tensorOnly).request('GET', `/v1/jobs/${first.id}/explain`)).rejects.toMatchObject({ status: 404, code: 'NOT_FOUND' });
  });
});
