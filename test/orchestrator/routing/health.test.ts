import { afterEach, describe, expect, it } from 'vitest';
import type { AgentMessage, OrchestratorMessage } from '../../../src/protocol/index.js';
import { jobView } from '../../../src/orchestrator/jobs/index.js';
import { JobCoreHarness, type FakeHost } from '../../helpers/job-core.js';

/** Per-attempt timeouts, health probes, breakers fed by outcomes — the job roles and the prober on a fake clock. */
let harness: JobCoreHarness;
afterEach(() => harness?.close());

type Run = Extract<OrchestratorMessage, { type: 'run' }>;
const timings = (computeMs = 100) => ({ loadMs: 0, computeMs, totalMs: computeMs });

/** Play the agent: answer a run (real batch or probe) with `done` for every job, through the hub's path. */
function finish(host: FakeHost, run: Run, computeMs = 100): void {
  for (const job of run.jobs) {
    const done: Extract<AgentMessage, { type: 'done' }> = { type: 'done', jobId: job.id, batchId: run.batchId, artifacts: [], result: { ok: true }, timings: timings(computeMs) };
    if (!harness.prober.claims(host.session, done)) harness.core.intake.done(host.session, done);
  }
}

function fail(host: FakeHost, run: Run, code = 'ENGINE_CRASHED', retryable = true): void {
  for (const job of run.jobs) {
    const failed: Extract<AgentMessage, { type: 'failed' }> = { type: 'failed', jobId: job.id, batchId: run.batchId, retryable, error: { code, message: 'boom' } };
    if (!harness.prober.claims(host.session, failed)) harness.core.intake.failed(host.session, failed);
  }
}

const runs = (host: FakeHost, kind: 'probe' | 'job' = 'job'): Run[] => host.of('run').filter((run) => Boolean(run.probe) === (kind === 'probe'));

describe('per-attempt timeout', () => {
  it('is factor × what the measured speed says the batch needs (at least the floor); a stalled batch fails over with AGENT_TIMEOUT and the breaker counts it', async () => {
    harness = new JobCoreHarness({ attemptTimeout: { factor: 4, floorMs: 1000, loadMs: 5000 }, retryBackoffMs: 100 });
    const laptop = harness.host('laptop', { resident: true });
    harness.throughput.sample('laptop', 'gen', { jobs: 1, cost: 64, computeMs: 500 }); // 2 jobs/s: one job needs 500 ms, so 2000 ms
    const job = harness.submit();
    await harness.settle();
    const [run] = runs(laptop);
    harness.core.intake.started(laptop.session, run!.batchId, [job.id]);
    harness.clock.advance(1999);
    await harness.settle();
    expect(harness.status(job.id)).toBe('running');
    harness.clock.advance(1);
    await harness.settle();
    expect(laptop.of('cancel')).toEqual([{ type: 'cancel', jobId: job.id }]);
    expect(harness.status(job.id)).toBe('queued');
    const [attempt] = (await jobView(harness.store, harness.job(job.id)!)).attempts;
    expect(attempt!.error).toEqual({ code: 'AGENT_TIMEOUT', message: 'Host laptop did not finish the batch within 2000 ms (4 × the 500 ms expected for 1 job at the measured speed)' });
    expect(harness.breakers.view('laptop', 'gen').consecutiveFailures).toBe(1);
    expect(await harness.metrics.text()).toMatch(/gpumesh_attempt_timeouts_total\{host="laptop",model="gen"\} 1/);
    // The retry runs, finishes in time, and nothing fires later.
    harness.clock.advance(100);
    await harness.settle();
    const second = runs(laptop)[1]!;
    finish(laptop, second);
    await harness.settle();
    expect(harness.status(job.id)).toBe('succeeded');
    harness.clock.advance(60_000);
    await harness.settle();
    expect(laptop.of('cancel')).toHaveLength(1);
  });

  it('scales with the work in the batch: a replica measured on small images gives a large one proportionally longer', async () => {
    harness = new JobCoreHarness({ attemptTimeout: { factor: 2, floorMs: 1000 }, policy: { retries: 0 } });
    const laptop = harness.host('laptop', { resident: true });
    harness.throughput.sample('laptop', 'gen', { jobs: 4, cost: 4 * 8 * 8, computeMs: 40 }); // 8×8 one-step images at 10 ms each
    const job = harness.core.states.create({
      id: 'j_large', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], hosts: null,
      input: { prompt: 'large', seed: 1, width: 64, height: 64, steps: 8 }, grantId: 'g', idempotencyKey: null, createdAt: harness.clock.now(), deadlineAt: null,
    });
    harness.core.dispatcher.enqueue(job);
    await harness.settle();
    harness.core.intake.started(laptop.session, runs(laptop)[0]!.batchId, [job.id]);
    // 64×64×8 is 512 times the work of 8×8×1: 5120 ms expected, 10240 ms allowed.
    harness.clock.advance(10_239);
    await harness.settle();
    expect(harness.status(job.id)).toBe('running');
    harness.clock.advance(1);
    await harness.settle();
    expect(harness.job(job.id)!.errorMessage).toBe('Host laptop did not finish the batch within 10240 ms (2 × the 5120 ms expected for 1 job at the measured speed)');
  });

  it('before a replica is measured it is the model\'s maxTimeoutMs, plus loadMs until the agent starts a model that was not resident', async () => {
    harness = new JobCoreHarness({ policy: { maxTimeoutMs: 60_000, retries: 0 }, attemptTimeout: { floorMs: 1000, loadMs: 30_000 } });
    const laptop = harness.host('laptop');
    const job = harness.submit();
    await harness.settle();
    harness.clock.advance(89_999);
    await harness.settle();
    expect(harness.status(job.id)).toBe('dispatched');
    harness.clock.advance(1);
    await harness.settle();
    expect(harness.job(job.id)).toMatchObject({ status: 'failed', errorCode: 'AGENT_TIMEOUT' });
    expect(harness.job(job.id)!.errorMessage).toBe(
      'Host laptop did not finish the batch within 90000 ms (the model\'s maxTimeoutMs: not measured on laptop yet, plus 30000 ms to load the model)',
    );
    expect(laptop.of('cancel')).toHaveLength(1);
  });

  it('is armed again from the moment the host says it started', async () => {
    harness = new JobCoreHarness({ attemptTimeout: { factor: 2, floorMs: 1000 } });
    const laptop = harness.host('laptop', { resident: true });
    harness.throughput.sample('laptop', 'gen', { jobs: 1, cost: 64, computeMs: 1000 }); // 2000 ms per job
    const job = harness.submit();
    await harness.settle();
    harness.clock.advance(1500);
    harness.core.intake.started(laptop.session, runs(laptop)[0]!.batchId, [job.id]);
    harness.clock.advance(1999);
    await harness.settle();
    expect(harness.status(job.id)).toBe('running');
    harness.clock.advance(1);
    await harness.settle();
    expect(harness.status(job.id)).toBe('queued');
  });

  it('a stalling host is caught and its jobs retried on another host; clients see the job succeed', async () => {
    harness = new JobCoreHarness({ attemptTimeout: { factor: 2, floorMs: 1000 }, retryBackoffMs: 50 });
    const stalls = harness.host('a-stalls', { resident: true });
    const healthy = harness.host('b-healthy', { resident: true });
    const job = harness.submit();
    await harness.settle();
    const [first] = runs(stalls);
    expect(first).toBeDefined(); // idle and unmeasured alike: the tie goes to the first id
    harness.clock.advance(10 * 60_000); // unmeasured: the model's maxTimeoutMs
    await harness.settle();
    harness.clock.advance(50);
    await harness.settle();
    // The retry passes over the host that failed it while another is free.
    const [second] = runs(healthy);
    expect(second!.jobs[0]!.id).toBe(job.id);
    expect((await jobView(harness.store, harness.job(job.id)!)).attempts[1]!.route!.skipped).toContainEqual({ host: 'a-stalls', reason: 'failed this job' });
    finish(healthy, second!);
    await harness.settle();
    expect(harness.status(job.id)).toBe('succeeded');
  });
});

describe('health probes', () => {
  it('probe an idle resident replica through the normal path: one job of the probe input, a slot taken, no client job touched', async () => {
    harness = new JobCoreHarness({ probeIntervalMs: 10_000 });
    const laptop = harness.host('laptop', { resident: true });
    await harness.settle(); // the prober notices the resident model
    harness.clock.advance(9_000);
    await harness.settle();
    expect(runs(laptop, 'probe')).toHaveLength(0);
    harness.clock.advance(1_000);
    await harness.settle();
    const [probe] = runs(laptop, 'probe');
    expect(probe).toMatchObject({ probe: true, model: { name: 'gen' }, jobs: [{ input: { prompt: 'gpumesh health probe', width: 8, height: 8, steps: 1 } }] });
    expect(laptop.session.freeSlots).toBe(0);
    // A client job waits for the slot the probe holds.
    const job = harness.submit();
    await harness.settle();
    expect(runs(laptop)).toHaveLength(0);
    finish(laptop, probe!);
    await harness.settle();
    expect(laptop.of('ack').flatMap((ack) => ack.jobIds)).toContain(probe!.jobs[0]!.id);
    expect(harness.health.replica('laptop', 'gen')).toMatchObject({ state: 'healthy' });
    expect(runs(laptop)[0]!.jobs[0]!.id).toBe(job.id);
    expect(await harness.metrics.text()).toMatch(/gpumesh_probes_total\{host="laptop",model="gen",outcome="ok"\} 1/);
  });

  it('stops probing a replica idle for four intervals, so its model can unload (scale to zero)', async () => {
    harness = new JobCoreHarness({ probeIntervalMs: 10_000 });
    const laptop = harness.host('laptop', { resident: true });
    await harness.settle();
    for (let i = 0; i < 6; i++) {
      harness.clock.advance(10_000);
      await harness.settle();
      for (const probe of runs(laptop, 'probe').slice(i)) finish(laptop, probe);
      await harness.settle();
    }
    // Probes at 10, 20, 30 and 40 s after it became resident; none once it has been idle for 40 s.
    expect(runs(laptop, 'probe')).toHaveLength(4);
    // Real work makes it worth watching again.
    const job = harness.submit();
    await harness.settle();
    finish(laptop, runs(laptop)[0]!);
    await harness.settle();
    expect(harness.status(job.id)).toBe('succeeded');
    harness.clock.advance(10_000);
    await harness.settle();
    expect(runs(laptop, 'probe')).toHaveLength(5);
  });

  it('a failed probe makes the replica unhealthy (the router passes it over) until a later probe succeeds', async () => {
    harness = new JobCoreHarness({ probeIntervalMs: 8_000 });
    const laptop = harness.host('laptop', { resident: true });
    await harness.settle();
    harness.clock.advance(8_000);
    await harness.settle();
    fail(laptop, runs(laptop, 'probe')[0]!, 'ENGINE_FAILED');
    await harness.settle();
    expect(harness.health.replica('laptop', 'gen')).toMatchObject({ state: 'unhealthy', detail: 'ENGINE_FAILED: boom' });
    const job = harness.submit();
    await harness.settle();
    expect(runs(laptop)).toHaveLength(0);
    expect(harness.router.route(harness.models.get('gen')!, { classes: ['image'], hosts: null }).skipped).toEqual([{ host: 'laptop', class: 'image', reason: 'unhealthy' }]);
    // An unhealthy replica is probed again after a quarter of the interval.
    harness.clock.advance(2_000);
    await harness.settle();
    finish(laptop, runs(laptop, 'probe')[1]!);
    await harness.settle();
    expect(runs(laptop)[0]!.jobs[0]!.id).toBe(job.id);
  });

  it('a probe that outlives its budget is a failure, and the host is told to stop it', async () => {
    harness = new JobCoreHarness({ probeIntervalMs: 5_000, attemptTimeout: { floorMs: 1000, factor: 2 } });
    const laptop = harness.host('laptop', { resident: true });
    harness.throughput.sample('laptop', 'gen', { jobs: 1, cost: 64, computeMs: 100 });
    await harness.settle();
    harness.clock.advance(5_000);
    await harness.settle();
    const [probe] = runs(laptop, 'probe');
    harness.clock.advance(1_000);
    await harness.settle();
    expect(laptop.of('cancel')).toEqual([{ type: 'cancel', jobId: probe!.jobs[0]!.id }]);
    expect(harness.health.replica('laptop', 'gen').detail).toMatch(/^Host laptop did not finish the batch within 1000 ms/);
    expect(laptop.session.freeSlots).toBe(1);
    // A late answer is acknowledged quietly: not refused, not counted.
    finish(laptop, probe!);
    await harness.settle();
    expect(harness.meshEvents('link:refused')).toEqual([]);
  });
});

describe('breakers fed by real outcomes, with probes as half-open trials', () => {
  it('opens on failures (input errors do not count), half-opens after openForS, closes after successesToClose probes', async () => {
    harness = new JobCoreHarness({ breakers: { failuresToOpen: 2, openForS: 5, successesToClose: 2, minCalls: 20 }, policy: { retries: 0 } });
    const laptop = harness.host('laptop', { resident: true });
    const bad = harness.submit();
    await harness.settle();
    fail(laptop, runs(laptop)[0]!, 'INVALID_INPUT', false);
    await harness.settle();
    expect(harness.status(bad.id)).toBe('failed');
    expect(harness.breakers.view('laptop', 'gen').consecutiveFailures).toBe(0);
    for (let i = 0; i < 2; i++) {
      harness.submit();
      await harness.settle();
      fail(laptop, runs(laptop).at(-1)!);
      await harness.settle();
    }
    expect(harness.breakers.state('laptop', 'gen')).toBe('open');
    expect(harness.meshEvents('breaker:opened')).toEqual([expect.objectContaining({ host: 'laptop', model: 'gen', reason: 'ENGINE_CRASHED: boom', openForMs: 5000 })]);
    // While open, work waits.
    const waiting = harness.submit();
    await harness.settle();
    expect(runs(laptop)).toHaveLength(3);
    harness.clock.advance(5_000);
    await harness.settle();
    expect(harness.meshEvents('breaker:half-open')).toHaveLength(1);
    // The trial is a probe, not the waiting client job.
    finish(laptop, runs(laptop, 'probe')[0]!);
    await harness.settle();
    expect(harness.breakers.state('laptop', 'gen')).toBe('half-open');
    finish(laptop, runs(laptop, 'probe')[1]!);
    await harness.settle();
    expect(harness.breakers.state('laptop', 'gen')).toBe('closed');
    expect(harness.meshEvents('breaker:closed')).toHaveLength(1);
    expect(runs(laptop).at(-1)!.jobs[0]!.id).toBe(waiting.id);
    expect(await harness.metrics.text()).toMatch(/gpumesh_breaker_state\{host="laptop",model="gen"\} 0/);
  });

  it('a flapping host (fails every third batch) is shed while the healthy host takes the traffic; every job succeeds', async () => {
    harness = new JobCoreHarness({ breakers: { failuresToOpen: 3, failureRatio: 0.3, window: 6, minCalls: 3, openForS: 60 }, retryBackoffMs: 10 });
    const flaky = harness.host('a-flaky', { resident: true });
    const steady = harness.host('b-steady', { resident: true });
    harness.throughput.sample('a-flaky', 'gen', { jobs: 1, cost: 64, computeMs: 10 }); // the flaky host is fast, so it is first choice
    harness.throughput.sample('b-steady', 'gen', { jobs: 1, cost: 64, computeMs: 50 });
    let flakyBatches = 0;
    const answered = new Set<string>();
    const jobs = [];
    for (let i = 0; i < 30; i++) {
      jobs.push(harness.submit());
      await harness.settle();
      // Each host answers the batches it was sent; the flaky one fails every third. Retries wait out their backoff.
      for (let round = 0; round < 5; round++) {
        for (const host of [flaky, steady]) {
          for (const run of runs(host).filter((candidate) => !answered.has(candidate.batchId))) {
            answered.add(run.batchId);
            if (host === flaky && ++flakyBatches % 3 === 0) fail(host, run);
            else finish(host, run, host === flaky ? 10 : 50);
          }
        }
        harness.clock.advance(10);
        await harness.settle();
      }
    }
    expect(jobs.map((job) => harness.status(job.id))).toEqual(jobs.map(() => 'succeeded'));
    expect(harness.breakers.state('a-flaky', 'gen')).toBe('open');
    expect(flakyBatches).toBeLessThan(10);
    expect(runs(steady).length).toBeGreaterThan(20);
    const retried = jobs.filter((job) => harness.job(job.id)!.attempts > 1);
    expect(retried.length).toBeGreaterThan(0);
    for (const job of retried) expect((await jobView(harness.store, harness.job(job.id)!)).attempts.at(-1)!.host).toBe('b-steady');
  });
});
