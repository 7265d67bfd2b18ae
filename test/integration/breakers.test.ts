import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HostView, JobView, MeshEvent } from '../../src/protocol/api/index.js';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { ScriptedAgent } from '../helpers/scripted-agent.js';

/**
 * A flapping host next to a healthy one: `gpumesh up` (the orchestrator and
 * its real local agent) and a scripted agent over a real WebSocket that fails
 * every third batch and stalls its fourth. Its breaker must open, half-open
 * (a probe is the trial), close and open again, while clients see only
 * successes and each attempt's route log names the hosts it passed over.
 */
let mesh: RunningMesh;
let flappy: ScriptedAgent;
const meshEvents: MeshEvent[] = [];
let stopEvents: () => void = () => {};

beforeAll(async () => {
  mesh = await startMesh({
    config: {
      breakers: { replica: { failuresToOpen: 2, failureRatio: 0.3, window: 6, minCalls: 3, openForS: 1, maxOpenForS: 4, successesToClose: 2 } },
      health: { probeIntervalMs: 0, attemptTimeout: { floorMs: 1500, factor: 3, loadMs: 60_000 } },
      retry: { backoffMs: 20 },
      models: { gen: { retries: 4 } },
    },
  });
  const controller = new AbortController();
  stopEvents = () => controller.abort();
  const response = await fetch(`${mesh.url}/v1/events`, { headers: { authorization: `Bearer ${mesh.admin}` }, signal: controller.signal });
  void (async () => {
    let buffer = '';
    const decoder = new TextDecoder();
    for await (const chunk of response.body!) {
      buffer += decoder.decode(chunk as Uint8Array, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const data = /^data: (.*)$/m.exec(buffer.slice(0, end))?.[1];
        buffer = buffer.slice(end + 2);
        const event = data ? (JSON.parse(data) as { type: string }) : null;
        if (event?.type.includes(':')) meshEvents.push(event as MeshEvent);
      }
    }
  })().catch(() => {});
  const grant = (await mesh.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'flappy', classes: ['image'] })).token;
  flappy = new ScriptedAgent({
    url: mesh.url, grant, host: 'flappy', classes: ['image'],
    batches: (n) => (n === 4 ? 'stall' : n % 3 === 0 ? 'fail' : 'ok'),
  });
  await flappy.welcomed;
});

afterAll(async () => {
  stopEvents();
  await flappy?.close();
  await mesh?.stop();
  removeDir(mesh.data);
});

const breakerEvents = (type: string) => meshEvents.filter((event) => event.type === type && 'model' in event && event.host === 'flappy' && event.model === 'gen');

describe('a flapping host behind a circuit breaker', () => {
  it('is shed while the healthy host takes the traffic; its breaker opens, half-opens, closes and opens again; clients see only successes', async () => {
    const ids: string[] = [];
    const deadline = Date.now() + 45_000;
    // Waves of small jobs until the breaker has gone round once and opened again (bounded in time).
    while (breakerEvents('breaker:opened').length < 2 && Date.now() < deadline) {
      const wave = await Promise.all(Array.from({ length: 8 }, (_, i) => mesh.client().submit({
        type: 'image', input: { prompt: `wave job ${ids.length + i}`, width: 8, height: 8, steps: 1 },
      })));
      ids.push(...wave.map((job) => job.id));
      const ends = await Promise.all(wave.map((job) => mesh.client().follow(job.id)));
      expect(ends.map((end) => end.type)).toEqual(wave.map(() => 'succeeded'));
    }
    expect(breakerEvents('breaker:opened').length).toBeGreaterThanOrEqual(2);
    expect(breakerEvents('breaker:half-open').length).toBeGreaterThanOrEqual(1);
    expect(breakerEvents('breaker:closed').length).toBeGreaterThanOrEqual(1);
    const [firstOpen, secondOpen] = breakerEvents('breaker:opened') as Extract<MeshEvent, { type: 'breaker:opened' }>[];
    expect(firstOpen!.reason).toMatch(/^ENGINE_FAILED: scripted failure/);
    expect(secondOpen!.openForMs).toBe(1000); // it closed in between, so the period starts over
    expect(flappy.probes).toBeGreaterThanOrEqual(2); // the half-open trials were probes, not client jobs

    const views = await Promise.all(ids.map((id) => mesh.client().job(id)));
    expect(views.map((view) => view.status)).toEqual(ids.map(() => 'succeeded'));
    const attempts = views.flatMap((view) => view.attempts.map((attempt) => ({ view, attempt })));
    const failed = attempts.filter(({ attempt }) => attempt.host === 'flappy' && attempt.error);
    expect(failed.map(({ attempt }) => attempt.error!.code)).toEqual(expect.arrayContaining(['ENGINE_FAILED', 'AGENT_TIMEOUT']));
    const timedOut = failed.find(({ attempt }) => attempt.error!.code === 'AGENT_TIMEOUT')!;
    expect(timedOut.attempt.error!.message).toMatch(/^Host flappy did not finish the batch within 1500 ms \(the floor;/);
    // Every job that failed on flappy was retried and succeeded; retries go to the other host when it has a free slot.
    for (const { view } of failed) expect(view.attempts.at(-1)!.status).toBe('succeeded');
    expect(failed.some(({ view }) => view.attempts.at(-1)!.host !== 'flappy')).toBe(true);
    // The route log: the flappy host passed over while its breaker was open, and retries sent elsewhere.
    const skips = attempts.flatMap(({ attempt }) => attempt.route?.skipped ?? []);
    expect(skips).toContainEqual({ host: 'flappy', reason: 'breaker open' });
    const routed = attempts.find(({ attempt }) => attempt.route?.skipped.some((skip) => skip.host === 'flappy' && skip.reason === 'breaker open'))!;
    expect(routed.attempt.route).toMatchObject({ host: routed.attempt.host, class: 'image' });
    // While its breaker was open the healthy host took the work.
    const local = attempts.filter(({ attempt }) => attempt.host !== 'flappy' && attempt.status === 'succeeded').length;
    expect(local).toBeGreaterThan(0);
  });

  it('shows breakers, health, capacity and throughput in /v1/hosts, /metrics, the log and gpumesh status', async () => {
    const { hosts } = await mesh.client().request<{ hosts: HostView[] }>('GET', '/v1/hosts');
    const host = hosts.find((entry) => entry.id === 'flappy')!;
    expect(host).toMatchObject({ connected: true, health: 'healthy', concurrency: 1, classes: ['image'] });
    const replica = host.replicas.find((entry) => entry.model === 'gen')!;
    expect(replica.throughput).toBeGreaterThan(100);
    expect(replica.breaker.opens).toBeGreaterThanOrEqual(1);
    expect(replica.breaker.lastFailure).toMatch(/ENGINE_FAILED|AGENT_TIMEOUT/);
    const healthy = hosts.find((entry) => entry.id !== 'flappy')!;
    expect(healthy.replicas.find((entry) => entry.model === 'gen')!.throughput).toBeGreaterThan(0);

    const metrics = new TextDecoder().decode(await mesh.client().download('/metrics'));
    expect(metrics).toMatch(/gpumesh_breaker_state\{host="flappy",model="gen"\} [012]/);
    expect(metrics).toMatch(/gpumesh_breaker_transitions_total\{host="flappy",model="gen",to="open"\} [1-9]/);
    expect(metrics).toMatch(/gpumesh_breaker_transitions_total\{host="flappy",model="gen",to="closed"\} [1-9]/);
    expect(metrics).toMatch(/gpumesh_attempt_timeouts_total\{host="flappy",model="gen"\} 1/);
    expect(metrics).toMatch(/gpumesh_probes_total\{host="flappy",model="gen",outcome="ok"\} [2-9]/);
    expect(metrics).toMatch(/gpumesh_replica_throughput_jobs_per_second\{host="flappy",model="gen"\} \d/);
    const file = join(mesh.data, 'metrics.txt');
    writeFileSync(file, metrics);
    const checked = await promisify(execFile)('sh', ['-c', `promtool check metrics < ${file}`]).catch((error: { stdout: string; stderr: string }) => {
      throw new Error(`promtool check metrics failed: ${error.stdout}${error.stderr}`);
    });
    expect(checked.stdout + checked.stderr).not.toMatch(/error/i);

    const logs = mesh.output() + readFileSync(join(mesh.data, 'logs', 'orchestrator.log'), 'utf8');
    expect(logs).toContain('breaker of flappy/gen opened');
    expect(logs).toContain('breaker of flappy/gen closed');

    const { gpumeshRun } = await import('../helpers/processes.js');
    const status = await gpumeshRun(['status'], { GPUMESH_HOME: mesh.data, GPUMESH_URL: mesh.url });
    expect(status.code, status.output).toBe(0);
    expect(status.output).toMatch(/SLOTS FREE\s+HEALTH\s+LINK BREAKER/);
    expect(status.output).toMatch(/flappy\s+image\s+gpu0 scripted .*\s+healthy\s+closed/);
    expect(status.output).toMatch(/HOST\s+MODEL\s+RESIDENT\s+THROUGHPUT \(batches\)\s+HEALTH\s+BREAKER/);
    expect(status.output).toMatch(/flappy\s+gen\s+yes\s+\d+ jobs\/s \(\d+\)\s+healthy\s+(closed|open until|half-open)/);
  });

  it('a job that only the flapping host may run (a hosts caveat) waits while its breaker is open, and explain says why', async () => {
    const narrow = (await mesh.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'client', hosts: ['flappy'] })).token;
    // flappy reconnects as a host that fails every batch and stalls every probe: its breaker opens (if it is not open still) and stays so.
    const failing = new ScriptedAgent({
      url: mesh.url, grant: (await mesh.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'flappy', classes: ['image'] })).token,
      host: 'flappy', classes: ['image'], batches: () => 'fail', probes: () => 'stall',
    });
    await failing.welcomed;
    await flappy.close();
    const client = mesh.client(narrow);
    const job = await client.submit({ type: 'image', input: { prompt: 'only on flappy', width: 8, height: 8, steps: 1 } });
    const view = await waitFor(async () => {
      const current = await client.request<{ status: string; waiting: { for: string; hosts: { host: string; reason: string | null }[] } | null }>('GET', `/v1/jobs/${job.id}/explain`);
      return current.status === 'queued' && current.waiting?.for === 'a host of its classes' ? current : null;
    }, { what: 'the job to wait for a host', timeoutMs: 20_000 });
    expect(view.waiting!.hosts).toEqual(expect.arrayContaining([
      expect.objectContaining({ host: 'flappy', reason: 'breaker open' }),
      expect.objectContaining({ reason: 'host not granted' }),
    ]));
    // Whatever it tried on flappy failed; nothing ran anywhere else.
    const current = await client.job(job.id);
    expect((current as JobView).attempts.every((attempt) => attempt.host === 'flappy' && attempt.status === 'failed')).toBe(true);
    await client.request('DELETE', `/v1/jobs/${job.id}`);
    await failing.close();
  });
});
