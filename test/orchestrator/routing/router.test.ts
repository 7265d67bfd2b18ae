import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../helpers/fake-clock.js';
import { resolveConfig } from '../../../src/orchestrator/config/config.js';
import type { RegisteredModel } from '../../../src/orchestrator/registry/index.js';
import {
  BreakerBoard, decodeRoute, encodeRoute, HealthBook, HostRegistry, HostSession, NAMED_SKIPS, Router, SCAN_ALL_UP_TO, ThroughputBook, TWO_CHOICES_ABOVE,
  type RouteRequest,
} from '../../../src/orchestrator/routing/index.js';

const model = (memoryMB = 100): RegisteredModel => ({
  manifest: { name: 'gen', version: '1', engine: 'onnx', digest: 'sha256:gen', bytes: 1, memoryMB, jobTypes: ['image'], params: {} },
  policy: { batching: { maxBatchSize: 1, preferredBatchSizes: [], maxQueueDelayMs: 0 }, maxQueueSize: 10, maxTimeoutMs: 1000, retries: 0,
    replicas: { min: 0, max: null, targetInFlight: 2, idleWindowMs: 1000 } },
  jobInputs: { normalize: (input) => input, compatKey: () => '', probeInput: () => ({}), cost: () => 1 },
});

/** A router over its real parts (registry, breakers, health, throughput) on a fake clock. */
function mesh(options: { random?: () => number; heartbeatMs?: number } = {}) {
  const clock = new FakeClock(0);
  const hosts = new HostRegistry();
  const breakers = new BreakerBoard({ clock, policies: resolveConfig({ breakers: { replica: { failuresToOpen: 2, openForS: 10 } } }, '/tmp').breakers });
  const health = new HealthBook({ clock, heartbeatMs: options.heartbeatMs ?? 1_000_000 });
  const throughput = new ThroughputBook();
  const router = new Router({ hosts, breakers, health, throughput, random: options.random });
  const host = (id: string, hostOptions: { classes?: string[]; engines?: string[]; budgetMB?: number; concurrency?: number; cached?: string[] } = {}): HostSession => {
    const session = new HostSession({
      id, classes: hostOptions.classes ?? ['image'], engines: hostOptions.engines ?? ['onnx'], concurrency: hostOptions.concurrency ?? 1, version: 't',
      devices: [{ id: 'gpu0', kind: 'gpu', name: 'g', memoryTotalMB: 8000, budgetMB: hostOptions.budgetMB ?? 4000, usedMB: 0 }],
    }, hostOptions.cached ?? [], id, clock.now(), () => {});
    hosts.set(session);
    return session;
  };
  return { clock, hosts, breakers, health, throughput, router, host };
}

const image: RouteRequest = { classes: ['image'], hosts: null };

const busy = (session: HostSession, jobs = 1): void => {
  session.batches.set(`b-${session.id}-${session.batches.size}`, { id: 'b', model: 'gen', jobIds: new Set(Array.from({ length: jobs }, (_, i) => `${session.batches.size}-${i}`)), dispatchedAt: 0 });
};

const reasons = (skipped: { host: string; reason: string }[]): Record<string, string> => Object.fromEntries(skipped.map((skip) => [skip.host, skip.reason]));

describe('Router: which hosts can take a job, and why the others cannot', () => {
  it('names a reason for every host it passes over', () => {
    const { router, host, hosts, breakers, health, clock } = mesh({ heartbeatMs: 1000 });
    host('desktop', { classes: ['video'] });
    host('no-onnx', { engines: ['comfyui'] });
    host('tiny', { budgetMB: 50 });
    const draining = host('draining');
    draining.draining = true;
    const full = host('full');
    busy(full);
    host('flaky');
    breakers.failure('flaky', 'gen', 'ENGINE_CRASHED');
    breakers.failure('flaky', 'gen', 'ENGINE_CRASHED');
    host('sick');
    health.probed('sick', 'gen', false, 'ENGINE_FAILED: boom');
    const gone = host('gone');
    hosts.delete(gone, clock.now());
    const good = host('laptop');

    const decision = router.route(model(), image);
    expect(decision.host).toBe(good);
    expect(decision.class).toBe('image');
    expect(reasons(decision.skipped)).toEqual({
      desktop: 'class not granted', 'no-onnx': 'engine missing', tiny: 'model too large', draining: 'draining',
      full: 'no free slot', flaky: 'breaker open', sick: 'unhealthy', gone: 'disconnected',
    });
    // Granted hosts narrow it further.
    const narrowed = router.route(model(), { classes: ['image'], hosts: ['full', 'gone'] });
    expect(narrowed.host).toBeNull();
    expect(narrowed.waitingFor).toBe('a free slot');
    expect(reasons(narrowed.skipped)).toMatchObject({ laptop: 'host not granted', full: 'no free slot', gone: 'disconnected' });
    // A host whose heartbeats are overdue is unhealthy before it is dropped.
    clock.advance(2500);
    expect(reasons(router.route(model(), image).skipped).laptop).toBe('unhealthy');
  });

  it('tries the classes in order: a later class is a fallback, used only when the earlier has no usable replica', () => {
    const { router, host, breakers, hosts, clock } = mesh();
    const laptop = host('laptop', { classes: ['image'] });
    const cloud = host('cloud', { classes: ['cloud'] });
    const request: RouteRequest = { classes: ['image', 'cloud'], hosts: null };
    expect(router.route(model(), request)).toMatchObject({ host: laptop, class: 'image' });
    // Busy but usable: the job waits for it rather than spilling to the fallback.
    busy(laptop);
    expect(router.route(model(), request)).toMatchObject({ host: null, class: 'image', waitingFor: 'a free slot' });
    laptop.batches.clear();
    breakers.failure('laptop', 'gen', 'ENGINE_FAILED');
    breakers.failure('laptop', 'gen', 'ENGINE_FAILED');
    const fallback = router.route(model(), request);
    expect(fallback).toMatchObject({ host: cloud, class: 'cloud' });
    expect(reasons(fallback.skipped)).toEqual({ laptop: 'breaker open' });
    // Gone altogether: still the fallback, and the decision says the laptop is disconnected.
    hosts.delete(laptop, clock.now());
    expect(reasons(router.route(model(), request).skipped)).toEqual({ laptop: 'disconnected' });
    // A grant that allows only the first class gets no fallback.
    expect(router.route(model(), { classes: ['image'], hosts: null })).toMatchObject({ host: null, waitingFor: 'a host of its classes' });
  });

  it('prefers the model resident, then its file cached, then the least loaded relative to measured throughput', () => {
    const { router, host } = mesh();
    const cold = host('cold', { concurrency: 4 });
    const cached = host('cached', { concurrency: 4, cached: ['sha256:gen'] });
    const warm = host('warm', { concurrency: 4 });
    warm.loaded({ model: 'gen', digest: 'sha256:gen', device: 'gpu0', memoryMB: 100, lastUsedAt: 0 });
    busy(warm, 3);
    const first = router.route(model(), image);
    expect(first).toMatchObject({ host: warm, warmth: 'resident' });
    expect(reasons(first.skipped)).toEqual({ cold: 'not resident', cached: 'not resident' });
    busy(warm);
    busy(warm);
    busy(warm);
    expect(router.route(model(), image)).toMatchObject({ host: cached, warmth: 'cached' });
    expect(cold.jobsInFlight).toBe(0);
  });

  it('gives a fast replica proportionally more work than a slow one, not an even split', () => {
    const { router, host, throughput } = mesh();
    const fast = host('fast', { concurrency: 100 });
    const slow = host('slow', { concurrency: 100 });
    throughput.sample('fast', 'gen', { jobs: 8, cost: 8, computeMs: 1000 }); // 8 jobs/s
    throughput.sample('slow', 'gen', { jobs: 2, cost: 2, computeMs: 1000 }); // 2 jobs/s
    for (let i = 0; i < 50; i++) busy(router.route(model(), image).host!);
    // (in flight + 1) ÷ rate stays level: 40 on the fast one, 10 on the slow one.
    expect(fast.jobsInFlight).toBe(40);
    expect(slow.jobsInFlight).toBe(10);
    const decision = router.route(model(), image);
    expect(reasons(decision.skipped)).toEqual({ [decision.host!.id === 'fast' ? 'slow' : 'fast']: 'busier' });
  });

  it('an unmeasured replica is taken for a typical one (the median of the measured), so it gets work and is measured', () => {
    const { router, host, throughput } = mesh();
    const known = host('known', { concurrency: 10 });
    const fresh = host('fresh', { concurrency: 10 });
    throughput.sample('known', 'gen', { jobs: 4, cost: 4, computeMs: 1000 });
    busy(known, 2);
    expect(throughput.assumed('gen')).toBe(4);
    expect(router.route(model(), image).host).toBe(fresh);
  });

  it(`with more than ${TWO_CHOICES_ABOVE} candidates, draws two at random and takes the less loaded`, () => {
    const draws = [0.0, 0.0, 0.6, 0.5];
    const { router, host } = mesh({ random: () => draws.shift() ?? 0 });
    const hosts = ['h0', 'h1', 'h2', 'h3', 'h4', 'h5'].map((id) => host(id, { concurrency: 10 }));
    busy(hosts[0]!, 3);
    // First draw: index 0, second: 1 + floor(0 * 5) → h0 and h1; h1 is idle and wins.
    const first = router.route(model(), image);
    expect(first.host).toBe(hosts[1]);
    expect(reasons(first.skipped)).toEqual({ h0: 'busier', h2: 'not sampled', h3: 'not sampled', h4: 'not sampled', h5: 'not sampled' });
    // Second draw: floor(0.6 * 6) = 3, then (3 + 1 + floor(0.5 * 5)) % 6 = 0 → h3 and h0; h3 wins.
    expect(router.route(model(), image).host).toBe(hosts[3]);
  });

  it('keeps its decision compact and reads it back', () => {
    const { router, host } = mesh();
    host('desktop', { classes: ['video'] });
    const busyOne = host('busy');
    busy(busyOne);
    host('laptop');
    const decision = router.route(model(), image);
    const stored = encodeRoute(decision);
    expect(stored.length).toBeLessThan(60);
    expect(decodeRoute(stored)).toEqual({
      host: 'laptop', class: 'image', warmth: 'cold',
      skipped: [{ host: 'desktop', reason: 'class not granted' }, { host: 'busy', reason: 'no free slot' }], unlisted: {},
    });
    // A log stored before hosts were counted (four elements) still reads.
    expect(decodeRoute('["laptop","image",2,["busy",7]]')).toEqual({
      host: 'laptop', class: 'image', warmth: 'cold', skipped: [{ host: 'busy', reason: 'no free slot' }], unlisted: {},
    });
    expect(decodeRoute(null)).toBeNull();
    expect(decodeRoute('not json')).toBeNull();
  });

  it('with replicasOnly, a placed model goes only to its replicas (skip reason: no replica); with none usable, on demand', () => {
    const { hosts, breakers, health, throughput, host } = mesh();
    const router = new Router({ hosts, breakers, health, throughput, replicasOnly: true });
    const replica = host('replica');
    host('warm', { cached: ['sha256:gen'] });
    // Nothing placed yet: any usable host loads it on demand (the one with its file cached).
    expect(router.route(model(), image).host?.id).toBe('warm');
    // The autoscaler asked `replica` to load it: batches go there and wait for that load, rather than loading it elsewhere.
    replica.replicaChanges.set('gen', { change: 'load', at: 0 });
    const loading = router.route(model(), image);
    expect(loading.host).toBe(replica);
    expect(reasons(loading.skipped)).toEqual({ warm: 'no replica' });
    replica.replicaChanges.delete('gen');
    replica.loaded({ model: 'gen', digest: 'sha256:gen', device: 'gpu0', memoryMB: 100, lastUsedAt: 0 });
    const ready = router.route(model(), image);
    expect(ready.host).toBe(replica);
    expect(ready.warmth).toBe('resident');
    expect(reasons(ready.skipped)).toEqual({ warm: 'no replica' });
    expect(decodeRoute(encodeRoute(ready))?.skipped).toEqual([{ host: 'warm', reason: 'no replica' }]);
    // Its replica's breaker opens: no replica is usable, so another host takes the work on demand.
    breakers.failure('replica', 'gen', 'ENGINE_CRASHED');
    breakers.failure('replica', 'gen', 'ENGINE_CRASHED');
    const shed = router.route(model(), image);
    expect(shed.host?.id).toBe('warm');
    expect(reasons(shed.skipped)).toEqual({ replica: 'breaker open' });
  });

  it('with replicasOnly, a replica in a fallback class does not keep the job from a usable host of its preferred class', () => {
    const { hosts, breakers, health, throughput, host } = mesh();
    const router = new Router({ hosts, breakers, health, throughput, replicasOnly: true });
    const cloud = host('cloud', { classes: ['cloud'] });
    cloud.loaded({ model: 'gen', digest: 'sha256:gen', device: 'gpu0', memoryMB: 100, lastUsedAt: 0 });
    const request: RouteRequest = { classes: ['image', 'cloud'], hosts: null };
    // No image host: the fallback class's replica takes it.
    expect(router.route(model(), request).host).toBe(cloud);
    // An image host (re)joins without the model: it loads it on demand, rather than the job staying on the fallback.
    const laptop = host('laptop');
    expect(router.route(model(), request)).toMatchObject({ host: laptop, class: 'image', warmth: 'cold' });
  });
});

describe('Router on a large mesh: indexes instead of a scan, a bounded log', () => {
  const resident = (session: HostSession): void => session.loaded({ model: 'gen', digest: 'sha256:gen', device: 'gpu0', memoryMB: 100, lastUsedAt: 0 });
  const total = (unlisted: Record<string, number | undefined>): number => Object.values(unlisted).reduce<number>((sum, count) => sum + (count ?? 0), 0);

  it('prefers a free host with the model resident, names at most NAMED_SKIPS hosts and counts the rest', () => {
    const { router, host } = mesh();
    const all = Array.from({ length: 300 }, (_, i) => host(`h${i}`, { classes: [i % 3 === 0 ? 'video' : 'image'] }));
    for (const session of all.filter((_, i) => i % 10 === 1)) resident(session);
    for (const session of all.filter((_, i) => i % 20 === 1)) busy(session);
    for (let n = 0; n < 50; n++) {
      const decision = router.route(model(), image);
      expect(decision.warmth).toBe('resident');
      expect(decision.host!.freeSlots).toBe(1);
      expect(decision.host!.info.classes).toEqual(['image']);
      expect(decision.skipped.length).toBeLessThanOrEqual(NAMED_SKIPS);
      // Every host is accounted for: chosen, named or counted.
      expect(1 + decision.skipped.length + total(decision.unlisted)).toBe(300);
      expect(decision.unlisted['class not granted']).toBe(100);
    }
  });

  it('with no resident host free, draws a free one of the class; a class with none usable spills to the next', () => {
    const { router, host, breakers } = mesh();
    const images = Array.from({ length: SCAN_ALL_UP_TO + 10 }, (_, i) => host(`i${i}`));
    const clouds = Array.from({ length: 20 }, (_, i) => host(`c${i}`, { classes: ['cloud'] }));
    const request: RouteRequest = { classes: ['image', 'cloud'], hosts: null };
    for (const session of images.slice(0, 60)) busy(session);
    const drawn = router.route(model(), request);
    expect(images.slice(60)).toContain(drawn.host);
    // Every image host busy: the job waits for one rather than spilling to cloud.
    for (const session of images.slice(60)) busy(session);
    expect(router.route(model(), request)).toMatchObject({ host: null, class: 'image', waitingFor: 'a free slot' });
    // Every image host's breaker open: no usable image host at all, so cloud takes it.
    for (const session of images) for (let i = 0; i < 2; i++) breakers.failure(session.id, 'gen', 'ENGINE_CRASHED');
    const spilled = router.route(model(), request);
    expect(clouds).toContain(spilled.host);
    expect(spilled.class).toBe('cloud');
    expect(spilled.skipped.filter((skip) => skip.reason === 'breaker open')).toHaveLength(NAMED_SKIPS);
    expect(spilled.unlisted['breaker open']).toBe(images.length - NAMED_SKIPS);
  });

  it('keeps its indexes with hosts joining, leaving, loading and finishing work', () => {
    const { router, host, hosts, clock } = mesh();
    const all = Array.from({ length: SCAN_ALL_UP_TO + 1 }, (_, i) => host(`h${i}`));
    for (const session of all) busy(session);
    expect(router.route(model(), image).host).toBeNull();
    // One finishes its batch: the free-slot index has it.
    all[7]!.batches.clear();
    expect(router.route(model(), image).host).toBe(all[7]);
    // It leaves: nothing is free again; its replacement joins free and with the model resident.
    hosts.delete(all[7]!, clock.now());
    expect(router.route(model(), image).host).toBeNull();
    const back = host('h7');
    resident(back);
    expect(router.route(model(), image)).toMatchObject({ host: back, warmth: 'resident' });
    // The agent reports the model gone: no longer resident (its file stays cached).
    back.resident = [];
    expect(router.route(model(), image)).toMatchObject({ host: back, warmth: 'cached' });
  });

  it('with replicasOnly, sends batches to a replica the autoscaler asked to load, not yet resident', () => {
    const { hosts, breakers, health, throughput, host, clock } = mesh();
    const router = new Router({ hosts, breakers, health, throughput, replicasOnly: true });
    const all = Array.from({ length: SCAN_ALL_UP_TO + 6 }, (_, i) => host(`h${i}`));
    all[9]!.replicaChanges.set('gen', { change: 'load', at: clock.now() });
    for (let n = 0; n < 10; n++) expect(router.route(model(), image).host).toBe(all[9]);
    // Asked to unload it instead: no longer a replica, so any free host loads it on demand.
    all[9]!.replicaChanges.set('gen', { change: 'unload', at: clock.now() });
    expect(hosts.replicasIn('image', 'gen').size).toBe(0);
    expect(router.route(model(), image).host).not.toBeNull();
  });

  it('with replicasOnly, waits for a busy resident replica rather than loading the model elsewhere', () => {
    const { hosts, breakers, health, throughput, host } = mesh();
    const router = new Router({ hosts, breakers, health, throughput, replicasOnly: true });
    const all = Array.from({ length: SCAN_ALL_UP_TO + 6 }, (_, i) => host(`h${i}`));
    resident(all[3]!);
    expect(router.route(model(), image).host).toBe(all[3]);
    busy(all[3]!);
    expect(router.route(model(), image)).toMatchObject({ host: null, waitingFor: 'a free slot' });
  });

  it('decides as a full scan would: the same class, the same wait or placement, on random meshes', () => {
    let state = 7;
    const random = (): number => ((state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0) / 2 ** 32);
    const outcomes = new Set<string>();
    for (let trial = 0; trial < 60; trial++) {
      const replicasOnly = trial % 2 === 0;
      const { hosts, breakers, health, throughput, clock } = mesh({ random });
      const indexed = new Router({ hosts, breakers, health, throughput, random, replicasOnly });
      const scanning = new Router({ hosts, breakers, health, throughput, random, replicasOnly, scanAllUpTo: Infinity });
      const size = SCAN_ALL_UP_TO + 1 + Math.floor(random() * 150);
      const busyShare = random();
      // Now and then every image host's breaker is open: image jobs must spill to cloud, exactly when a scan would.
      const imageDown = trial % 5 === 1;
      for (let i = 0; i < size; i++) {
        const session = new HostSession({
          id: `h${i}`, classes: [random() < 0.6 ? 'image' : random() < 0.5 ? 'cloud' : 'video'], engines: random() < 0.95 ? ['onnx'] : ['comfyui'],
          concurrency: 1 + Math.floor(random() * 2), version: 't',
          devices: [{ id: 'gpu0', kind: 'gpu', name: 'g', memoryTotalMB: 8000, budgetMB: random() < 0.05 ? 50 : 4000, usedMB: 0 }],
        }, [], `s${i}`, clock.now(), () => {});
        hosts.set(session);
        if (random() < 0.2) session.loaded({ model: 'gen', digest: 'sha256:gen', device: 'gpu0', memoryMB: 100, lastUsedAt: 0 });
        if (random() < busyShare) busy(session);
        if (random() < busyShare) busy(session);
        if (random() < 0.05) session.draining = true;
        if (random() < 0.1 || (imageDown && session.info.classes[0] === 'image')) for (let f = 0; f < 2; f++) breakers.failure(session.id, 'gen', 'ENGINE_CRASHED');
      }
      for (const request of [image, { classes: ['image', 'cloud'], hosts: null }] satisfies RouteRequest[]) {
        const expected = scanning.route(model(), request);
        const actual = indexed.route(model(), request);
        const context = `trial ${trial}: ${size} hosts, replicasOnly ${replicasOnly}, classes ${request.classes.join(',')}`;
        expect({ placed: actual.host !== null, class: actual.class, waitingFor: actual.waitingFor }, context)
          .toEqual({ placed: expected.host !== null, class: expected.class, waitingFor: expected.waitingFor });
        outcomes.add(actual.host ? `placed on ${actual.class}` : `waiting for ${actual.waitingFor}`);
        if (actual.host) {
          expect(actual.host.freeSlots, context).toBeGreaterThan(0);
          expect(actual.host.info.classes, context).toContain(actual.class);
          expect(actual.host.draining || breakers.blocking(actual.host.id, 'gen') !== null, context).toBe(false);
        }
      }
    }
    // The meshes drawn cover placement in the preferred class, spilling to the fallback, and both kinds of waiting.
    expect([...outcomes].sort()).toEqual(['placed on cloud', 'placed on image', 'waiting for a free slot', 'waiting for a host of its classes']);
  });
});
