import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../../../src/protocol/clock.js';
import type { MeshEvent } from '../../../src/protocol/api/index.js';
import type { OrchestratorMessage } from '../../../src/protocol/index.js';
import { Autoscaler } from '../../../src/orchestrator/autoscale/index.js';
import { loadNote, ReplicaRequests } from '../../../src/orchestrator/autoscale/replica-requests.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { policyFor, resolveConfig, type ReplicaPolicy } from '../../../src/orchestrator/config/config.js';
import { EventBus } from '../../../src/orchestrator/events/event-bus.js';
import { MeshMetrics } from '../../../src/orchestrator/metrics/mesh-metrics.js';
import { type RegisteredModel } from '../../../src/orchestrator/registry/index.js';
import { JOB_INPUTS } from '../../../src/orchestrator/job-inputs/job-inputs.js';
import { BreakerBoard, HealthBook, HostRegistry, HostSession, Router, ThroughputBook } from '../../../src/orchestrator/routing/index.js';

/**
 * The autoscaler on a fake clock, with hosts whose links are arrays. Unless a
 * test says otherwise, each fake agent does what it is asked at once, the way
 * the agent hub reports it (`loaded` → resident, `unloaded` → gone).
 */
class Mesh {
  readonly clock = new FakeClock(1_000_000);
  readonly hosts = new HostRegistry();
  readonly events = new EventBus();
  readonly meshEvents: MeshEvent[] = [];
  readonly metrics = new MeshMetrics({ queueDepths: () => ({}), hosts: this.hosts });
  readonly breakers = new BreakerBoard({ clock: this.clock, policies: resolveConfig({}, '/tmp/unused').breakers });
  /** The router the facade builds: batches only where a replica is ready. */
  readonly router = new Router({
    hosts: this.hosts, breakers: this.breakers, health: new HealthBook({ clock: this.clock, heartbeatMs: 1_000_000 }),
    throughput: new ThroughputBook(), replicasOnly: true,
  });
  readonly sent = new Map<string, OrchestratorMessage[]>();
  readonly queued = new Map<string, number>();
  readonly model: RegisteredModel;
  readonly autoscaler: Autoscaler;
  /** Hosts that leave `load` unanswered (the test answers for them). */
  readonly silent = new Set<string>();
  /** Hosts that answer `load` with `load-refused` (NO_ROOM), as the agent hub reports it. */
  readonly refusing = new Set<string>();
  /** The classes gen's jobs route to, most preferred first. */
  classes = ['image'];

  constructor(replicas: Partial<ReplicaPolicy>, options: { memoryMB?: number } = {}) {
    const config = resolveConfig({}, '/tmp/unused');
    const policy = policyFor(config, 'gen');
    this.model = {
      manifest: { name: 'gen', version: '1', engine: 'onnx', digest: 'sha256:gen', bytes: 1, memoryMB: options.memoryMB ?? 100, jobTypes: ['image'], params: {} },
      policy: { ...policy, replicas: { ...policy.replicas, targetInFlight: 2, ...replicas } },
      jobInputs: JOB_INPUTS.image,
    };
    this.events.subscribeAll((scoped) => {
      if (scoped.kind === 'mesh') this.meshEvents.push(scoped.event);
    });
    this.autoscaler = new Autoscaler({
      clock: this.clock, hosts: this.hosts, router: this.router, events: this.events, metrics: this.metrics,
      blocked: (host, model) => this.breakers.blocking(host, model),
      log: pino({ level: 'silent' }), intervalMs: 1000, models: () => [this.model], classesOf: () => this.classes,
      queued: (name) => this.queued.get(name) ?? 0,
    });
  }

  host(id: string, options: { budgetMB?: number; cached?: string[]; classes?: string[]; resident?: boolean } = {}): HostSession {
    const sent: OrchestratorMessage[] = [];
    this.sent.set(id, sent);
    const session: HostSession = new HostSession(
      {
        id, classes: options.classes ?? ['image'], engines: ['onnx'], concurrency: 1, version: 'test',
        devices: [{ id: 'cpu', kind: 'cpu', name: 'test', memoryTotalMB: 8192, budgetMB: options.budgetMB ?? 1000, usedMB: 0 }],
      },
      options.cached ?? [], id, this.clock.now(), (message) => {
        sent.push(message);
        if (this.silent.has(id)) return;
        if (message.type === 'load' && this.refusing.has(id)) {
          queueMicrotask(() => this.autoscaler.refused(session, 'gen', { code: 'NO_ROOM', message: 'the models there are busy' }));
          return;
        }
        if (message.type === 'load') queueMicrotask(() => this.loaded(session));
        if (message.type === 'unload') queueMicrotask(() => {
          session.unloaded(message.model);
          this.hosts.changed();
        });
      },
    );
    if (options.resident) session.resident = [{ model: 'gen', digest: 'sha256:gen', device: 'cpu', memoryMB: 100, lastUsedAt: 0 }];
    this.hosts.set(session);
    return session;
  }

  loaded(session: HostSession): void {
    session.loaded({ model: 'gen', digest: 'sha256:gen', device: 'cpu', memoryMB: 100, lastUsedAt: this.clock.now() });
    this.hosts.changed();
    this.events.publishMesh({ type: 'replica:loaded', host: session.id, model: 'gen', device: 'cpu', memoryMB: 100, at: new Date(this.clock.now()).toISOString() });
  }

  /** A batch of `jobs` jobs of a model (gen unless said) running on a host. */
  running(session: HostSession, jobs: number, model = 'gen'): () => void {
    const id = `b${session.batches.size}-${session.id}`;
    session.batches.set(id, { id, model, jobIds: new Set(Array.from({ length: jobs }, (_, i) => `${id}-j${i}`)), dispatchedAt: this.clock.now() });
    return () => session.batches.delete(id);
  }

  of<T extends OrchestratorMessage['type']>(host: string, type: T): Extract<OrchestratorMessage, { type: T }>[] {
    return (this.sent.get(host) ?? []).filter((message) => message.type === type) as never;
  }

  where(): string[] {
    return [...this.hosts].filter((host) => host.hasReplica('gen')).map((host) => host.id).sort();
  }

  /** Let the coalesced looks and the fake agents' answers run. */
  async settle(): Promise<void> {
    for (let i = 0; i < 5; i++) await Promise.resolve();
  }

  /** Advance the clock in steps of one look, settling after each. */
  async advance(ms: number): Promise<void> {
    for (let left = ms; left > 0; left -= 1000) {
      this.clock.advance(Math.min(1000, left));
      await this.settle();
    }
  }
}

let mesh: Mesh;
afterEach(() => mesh?.autoscaler.close());

describe('Autoscaler (fake clock)', () => {
  it('scales out at once when queued + running work exceeds replicas × targetInFlight', async () => {
    mesh = new Mesh({ targetInFlight: 2 });
    const a = mesh.host('a');
    mesh.host('b');
    mesh.host('c');
    await mesh.settle();
    expect(mesh.where()).toEqual([]); // no traffic, minReplicas 0: nothing loaded
    mesh.queued.set('gen', 1);
    mesh.autoscaler.requestLook();
    await mesh.settle();
    expect(mesh.where()).toHaveLength(1);
    // Three jobs: ⌈3 ÷ 2⌉ = 2 replicas; the running ones count as well as the queued.
    const first = mesh.where()[0]!;
    mesh.queued.set('gen', 1);
    const done = mesh.running(mesh.hosts.get(first)!, 2);
    mesh.autoscaler.requestLook();
    await mesh.settle();
    expect(mesh.where()).toHaveLength(2);
    mesh.queued.set('gen', 10);
    mesh.autoscaler.requestLook();
    await mesh.settle();
    expect(mesh.where()).toEqual(['a', 'b', 'c']);
    expect(mesh.of('a', 'load')[0]).toMatchObject({ type: 'load', hold: false, model: { name: 'gen' } });
    expect(a.hasReadyReplica('gen')).toBe(true);
    done();
  });

  it('never loads more than maxReplicas, however deep the queue', async () => {
    mesh = new Mesh({ max: 2 });
    for (const id of ['a', 'b', 'c', 'd']) mesh.host(id);
    mesh.queued.set('gen', 500);
    await mesh.advance(5000);
    expect(mesh.where()).toHaveLength(2);
    expect([...mesh.sent.values()].flat().filter((message) => message.type === 'load')).toHaveLength(2);
    expect(mesh.autoscaler.view()[0]).toMatchObject({ desired: 2, max: 2, demand: 500 });
  });

  it('scales in only after the demand stayed lower for the whole idle window, down to minReplicas, unheld replicas first', async () => {
    mesh = new Mesh({ min: 1, idleWindowMs: 10_000 });
    for (const id of ['a', 'b', 'c']) mesh.host(id);
    await mesh.settle();
    expect(mesh.where()).toHaveLength(1); // the floor, loaded with no traffic
    const [floor] = mesh.where();
    expect(mesh.of(floor!, 'load')[0]!.hold).toBe(true);
    mesh.queued.set('gen', 6);
    await mesh.advance(1000);
    expect(mesh.where()).toEqual(['a', 'b', 'c']);
    // A short dip does not unload anything; the need comes back within the window.
    mesh.queued.set('gen', 0);
    await mesh.advance(6000);
    mesh.queued.set('gen', 6);
    await mesh.advance(1000);
    mesh.queued.set('gen', 0);
    // The need seen at one look holds until the next one; the window counts from there.
    await mesh.advance(11_000);
    expect(mesh.where()).toHaveLength(3);
    await mesh.advance(1000);
    expect(mesh.where()).toEqual([floor]);
    for (const id of ['a', 'b', 'c'].filter((id) => id !== floor)) expect(mesh.of(id, 'unload')).toEqual([{ type: 'unload', model: 'gen' }]);
    expect(mesh.autoscaler.view()[0]).toMatchObject({ desired: 1, replicas: [{ host: floor, state: 'ready', held: true }] });
    // And it stays there with no traffic at all.
    await mesh.advance(60_000);
    expect(mesh.where()).toEqual([floor]);
  });

  it('does not unload a replica that is running a batch, even after the window', async () => {
    mesh = new Mesh({ idleWindowMs: 2000 });
    const a = mesh.host('a');
    mesh.queued.set('gen', 1);
    await mesh.advance(1000);
    mesh.queued.set('gen', 0);
    const done = mesh.running(a, 1);
    await mesh.advance(10_000);
    expect(mesh.where()).toEqual(['a']);
    done();
    await mesh.advance(4000);
    expect(mesh.where()).toEqual([]);
    expect(mesh.of('a', 'unload')).toHaveLength(1);
  });

  it('keeps minReplicas loaded and held: loads them when hosts join, and replaces one whose host leaves', async () => {
    mesh = new Mesh({ min: 2 });
    const a = mesh.host('a');
    await mesh.settle();
    expect(mesh.where()).toEqual(['a']);
    mesh.host('b');
    await mesh.settle();
    expect(mesh.where()).toEqual(['a', 'b']);
    expect(mesh.of('a', 'load').map((message) => message.hold)).toEqual([true]);
    expect(mesh.of('b', 'load').map((message) => message.hold)).toEqual([true]);
    mesh.hosts.delete(a);
    mesh.host('c');
    await mesh.settle();
    expect(mesh.where()).toEqual(['b', 'c']);
    expect(mesh.of('c', 'load')[0]!.hold).toBe(true);
    await mesh.advance(600_000);
    expect(mesh.where()).toEqual(['b', 'c']);
    expect(mesh.of('b', 'unload')).toEqual([]);
  });

  it('holds a replica that is already resident (a host that came back) instead of loading another', async () => {
    mesh = new Mesh({ min: 1 });
    mesh.host('a');
    mesh.host('back', { resident: true });
    await mesh.settle();
    expect(mesh.where()).toEqual(['back']);
    expect(mesh.of('back', 'load')).toEqual([expect.objectContaining({ hold: true })]);
    expect(mesh.of('a', 'load')).toEqual([]);
  });

  it('a refused load is reported and the next host is asked; the refusing host only after a pause', async () => {
    mesh = new Mesh({ max: 1 });
    // Best fit: the smaller host is asked first, and it refuses.
    const small = mesh.host('small', { budgetMB: 150 });
    mesh.host('big', { budgetMB: 4000 });
    mesh.silent.add('small');
    mesh.queued.set('gen', 1);
    mesh.autoscaler.requestLook();
    await mesh.settle();
    expect(mesh.of('small', 'load')).toHaveLength(1);
    expect(mesh.of('big', 'load')).toHaveLength(0);
    mesh.autoscaler.refused(small, 'gen', { code: 'NO_ROOM', message: 'no room for "gen" while held models fill the budget' });
    await mesh.settle();
    expect(mesh.where()).toEqual(['big']);
    expect(mesh.meshEvents).toContainEqual(expect.objectContaining({ type: 'replica:refused', host: 'small', model: 'gen', code: 'NO_ROOM' }));
    expect(await mesh.metrics.text()).toMatch(/gpumesh_replica_load_refusals_total\{host="small",model="gen",code="NO_ROOM"\} 1/);
    // More demand: small is still in its pause (10 s), so nothing is asked of it.
    mesh.model.policy.replicas.max = 2;
    mesh.queued.set('gen', 10);
    await mesh.advance(5000);
    expect(mesh.of('small', 'load')).toHaveLength(1);
    await mesh.advance(6000);
    expect(mesh.of('small', 'load')).toHaveLength(2);
  });

  it('leaves out hosts whose budget is too small, of other classes, or draining; a draining host\'s replica stops counting', async () => {
    mesh = new Mesh({ targetInFlight: 1 }, { memoryMB: 500 });
    mesh.host('tiny', { budgetMB: 100 });
    mesh.host('video', { classes: ['video'] });
    const a = mesh.host('a');
    mesh.host('b');
    mesh.queued.set('gen', 1);
    await mesh.advance(1000);
    const [first] = mesh.where();
    expect(['a', 'b']).toContain(first);
    mesh.hosts.get(first!)!.draining = true;
    mesh.hosts.changed();
    await mesh.settle();
    expect(mesh.where().sort()).toEqual(['a', 'b']);
    expect(mesh.autoscaler.view()[0]!.replicas).toContainEqual({ host: first, state: 'draining', held: false });
    expect(mesh.of('tiny', 'load')).toEqual([]);
    expect(mesh.of('video', 'load')).toEqual([]);
    expect(a.id).toBe('a');
  });

  it('prefers a host that has the model file cached, then the least busy (with other work)', async () => {
    mesh = new Mesh({ targetInFlight: 1 });
    const busy = mesh.host('busy');
    mesh.running(busy, 3, 'other');
    mesh.host('idle');
    mesh.host('warm', { cached: ['sha256:gen'] });
    mesh.queued.set('gen', 1);
    await mesh.advance(1000);
    expect(mesh.where()).toEqual(['warm']);
    mesh.queued.set('gen', 2);
    await mesh.advance(1000);
    expect(mesh.where()).toEqual(['idle', 'warm']);
  });

  it('a replica being loaded takes batches at once; an unloading one stops counting the moment the unload is sent', async () => {
    mesh = new Mesh({ idleWindowMs: 0 });
    const a = mesh.host('a');
    mesh.host('b');
    mesh.silent.add('a');
    const route = () => mesh.router.route(mesh.model, { classes: ['image'], hosts: null });
    mesh.queued.set('gen', 1);
    await mesh.advance(1000);
    expect(a.hasReplica('gen')).toBe(true);
    expect(a.isResident('gen')).toBe(false);
    // The batch goes to the host loading it (and waits there for the load), not on demand to the other one.
    expect(route().host).toBe(a);
    expect(route().skipped).toEqual([{ host: 'b', class: 'image', reason: 'no replica' }]);
    mesh.loaded(a);
    mesh.queued.set('gen', 0);
    await mesh.advance(2000);
    expect(mesh.of('a', 'unload')).toHaveLength(1);
    expect(a.isResident('gen')).toBe(true);
    expect(a.hasReplica('gen')).toBe(false);
    expect(mesh.autoscaler.view()[0]!.replicas).toEqual([{ host: 'a', state: 'unloading', held: false }]);
  });

  it('places by class order, counts a load on demand as a replica, and works around a replica its breaker blocks', async () => {
    mesh = new Mesh({ targetInFlight: 1 });
    // gen routes to [image, cloud]: cloud hosts are the fallback.
    mesh.classes = ['image', 'cloud'];
    mesh.host('cloud-1', { classes: ['cloud'], cached: ['sha256:gen'] });
    const image = mesh.host('image-1');
    mesh.queued.set('gen', 1);
    await mesh.advance(1000);
    expect(mesh.where()).toEqual(['image-1']); // the preferred class first, even though the fallback has the file
    // A batch the router sent on demand to a host counts as that host's replica: no second load for it.
    const onDemand = mesh.host('image-2');
    mesh.running(onDemand, 1);
    mesh.queued.set('gen', 1);
    await mesh.advance(1000);
    expect(mesh.where()).toEqual(['image-1', 'image-2']);
    expect(mesh.of('image-2', 'load')).toEqual([]);
    // image-1's breaker opens: its replica takes no batches, so it does not count, and the fallback class is loaded.
    mesh.breakers.failure('image-1', 'gen', 'ENGINE_CRASHED');
    mesh.breakers.failure('image-1', 'gen', 'ENGINE_CRASHED');
    mesh.breakers.failure('image-1', 'gen', 'ENGINE_CRASHED');
    mesh.queued.set('gen', 2);
    await mesh.advance(1000);
    expect(mesh.of('cloud-1', 'load')).toHaveLength(1);
    expect(mesh.of('image-1', 'unload')).toEqual([]);
    expect(image.hasReplica('gen')).toBe(true);
  });

  it('after a turn of queued jobs it looks again only when the model\'s need rose: a steady stream costs no look, a rise scales out after that turn', async () => {
    mesh = new Mesh({ targetInFlight: 2 });
    for (const id of ['a', 'b', 'c']) mesh.host(id);
    const queue = async (jobs: number): Promise<void> => {
      mesh.queued.set('gen', jobs);
      mesh.events.publish({ type: 'queued', jobId: 'j', model: 'gen', jobType: 'image', prompt: null, at: '' }, { type: 'image', model: 'gen', album: 'default' });
      await new Promise((resolve) => setImmediate(resolve)); // the turn ends
      await mesh.settle();
    };
    await queue(1); // scaled to zero: looked at before the job is routed
    expect(mesh.where()).toHaveLength(1);
    // The same need after each turn: no look (each look sets the replica gauges), nothing sent.
    const looks = vi.spyOn(mesh.metrics, 'replicas');
    for (let turn = 0; turn < 3; turn++) await queue(2);
    expect(looks).not.toHaveBeenCalled();
    expect(mesh.where()).toHaveLength(1);
    expect([...mesh.sent.values()].flat().filter((message) => message.type === 'load')).toHaveLength(1);
    // Five jobs: ⌈5 ÷ 2⌉ = 3 replicas, loaded after that very turn.
    await queue(5);
    expect(looks).toHaveBeenCalled();
    expect(mesh.where()).toEqual(['a', 'b', 'c']);
    // A need that fell and came back records the fall, as a look would: the demand shows it.
    await queue(1);
    expect(mesh.autoscaler.view()[0]).toMatchObject({ demand: 1, desired: 3 });
  });

  it('a replica gets the whole idle window from when it was first seen or last given a batch, however low the demand', async () => {
    mesh = new Mesh({ idleWindowMs: 10_000 });
    const back = mesh.host('back', { resident: true }); // joined holding the model, with no traffic at all
    await mesh.advance(9000);
    expect(mesh.where()).toEqual(['back']);
    // A batch dispatched there (the event the dispatcher publishes) restarts its idle clock.
    mesh.events.publish({ type: 'dispatched', jobId: 'j', host: 'back', replica: 'back/gen', batchId: 'b', batchSize: 1, attempt: 1, at: '' },
      { type: 'image', model: 'gen', album: 'default' });
    await mesh.advance(9000);
    expect(mesh.where()).toEqual(['back']);
    await mesh.advance(3000);
    expect(mesh.where()).toEqual([]);
    expect(mesh.of('back', 'unload')).toHaveLength(1);
    expect(back.isResident('gen')).toBe(false);
  });
});

describe('loads asked for (gpumesh models load)', () => {
  /** ReplicaRequests over the fake mesh; real time for its short wait for the next heartbeat (1 ms here). */
  const requests = () => new ReplicaRequests({ autoscaler: mesh.autoscaler, hosts: mesh.hosts, events: mesh.events, clock: systemClock, heartbeatMs: 1 });
  const hostsOf = (answer: { loaded: { host: string }[] }) => answer.loaded.map((change) => change.host).sort();

  it('plans max(1, minReplicas) hosts: those holding it first, then the autoscaler\'s order, hosts it passes over for now last', async () => {
    mesh = new Mesh({ min: 0 });
    mesh.host('big', { budgetMB: 4000 });
    mesh.host('small', { budgetMB: 200 });
    mesh.host('cached', { budgetMB: 4000, cached: ['sha256:gen'] });
    mesh.host('paused', { budgetMB: 150 });
    mesh.host('video', { classes: ['video'] });
    mesh.host('tiny', { budgetMB: 50 });
    const holder = mesh.host('holder', { budgetMB: 4000, resident: true });
    mesh.silent.add('paused');
    // A refusal puts paused in the autoscaler's pause: it would not place a replica there now.
    mesh.autoscaler.refused(mesh.hosts.get('paused')!, 'gen', { code: 'NO_ROOM', message: 'busy' });
    await mesh.settle();
    const plan = mesh.autoscaler.planLoad(mesh.model);
    expect(plan).toMatchObject({ wanted: 1, asked: 1, max: null });
    // Not video (another class) nor tiny (a budget too small); cached before small (best fit comes after the cache).
    expect(plan.hosts.map((host) => host.id)).toEqual(['holder', 'cached', 'small', 'big', 'paused']);
    expect(plan.hosts[0]).toBe(holder);

    mesh.model.policy.replicas.min = 3;
    expect(mesh.autoscaler.planLoad(mesh.model).wanted).toBe(3);
    expect(mesh.autoscaler.planLoad(mesh.model, { replicas: 2 }).wanted).toBe(2);
    mesh.model.policy.replicas.max = 4;
    expect(mesh.autoscaler.planLoad(mesh.model, { replicas: 9 })).toMatchObject({ wanted: 4, asked: 9, max: 4 });
    // A named host: that one alone, whatever the policy.
    expect(mesh.autoscaler.planLoad(mesh.model, { host: 'big' })).toMatchObject({ wanted: 1, hosts: [mesh.hosts.get('big')] });
    expect(() => mesh.autoscaler.planLoad(mesh.model, { host: 'tiny' })).toThrow(/tiny that can load gen/);
  });

  it('leaves out hosts whose breaker blocks the model; none left is NOT_FOUND', async () => {
    mesh = new Mesh({});
    mesh.host('a');
    for (let i = 0; i < 3; i++) mesh.breakers.failure('a', 'gen', 'ENGINE_CRASHED');
    expect(() => mesh.autoscaler.planLoad(mesh.model)).toThrow(expect.objectContaining({ code: 'NOT_FOUND' }));
  });

  it('minReplicas 2 on two hosts: resident on both, each with its memory before and after; a held replica stays held', async () => {
    mesh = new Mesh({ min: 2 });
    mesh.host('a');
    mesh.host('b');
    mesh.silent.add('a');
    mesh.silent.add('b');
    await mesh.settle();
    // The autoscaler's floor is on its way (held) but not answered: the asked load waits for it.
    expect(mesh.where()).toEqual(['a', 'b']);
    mesh.silent.clear();
    const answer = await requests().load(mesh.model);
    expect(answer).toMatchObject({ model: 'gen', wanted: 2, note: null });
    expect(hostsOf(answer)).toEqual(['a', 'b']);
    for (const change of answer.loaded) expect(change).toMatchObject({ change: 'loaded', device: 'cpu', memoryMB: 100, before: [expect.objectContaining({ id: 'cpu' })], after: [expect.objectContaining({ id: 'cpu' })] });
    // The asked load keeps the floor's hold: a load without it would let the agent's idle unload take the replica.
    expect(mesh.of('a', 'load').map((message) => message.hold)).toEqual([true, true]);
    expect(mesh.of('b', 'load').map((message) => message.hold)).toEqual([true, true]);
  });

  it('minReplicas 3 with two hosts: loads both and says 2 of 3, and why', async () => {
    mesh = new Mesh({ min: 3 });
    mesh.host('a');
    mesh.host('b');
    const answer = await requests().load(mesh.model);
    expect(hostsOf(answer)).toEqual(['a', 'b']);
    expect(answer).toMatchObject({ wanted: 3, note: '2 of 3 replicas: only 2 hosts can serve it' });
  });

  it('a host that refuses is replaced by the next in line; refusals everywhere keep the NO_ROOM error', async () => {
    mesh = new Mesh({});
    mesh.host('small', { budgetMB: 150 });
    mesh.host('mid', { budgetMB: 400 });
    mesh.host('big', { budgetMB: 4000 });
    mesh.refusing.add('small');
    const answer = await requests().load(mesh.model, { replicas: 2 });
    expect(hostsOf(answer)).toEqual(['big', 'mid']);
    expect(answer.note).toBeNull();
    expect(mesh.of('small', 'load')).toHaveLength(1);

    mesh.refusing.add('mid');
    mesh.refusing.add('big');
    for (const host of mesh.hosts) host.unloaded('gen');
    await expect(requests().load(mesh.model, { host: 'mid' })).rejects.toMatchObject({ code: 'NO_ROOM', message: expect.stringContaining('mid refused: NO_ROOM: the models there are busy') });
    mesh.refusing.delete('big');
    const partial = await requests().load(mesh.model, { replicas: 3 });
    expect(hostsOf(partial)).toEqual(['big']);
    expect(partial.note).toMatch(/^1 of 3 replicas: (small|mid) refused: NO_ROOM: the models there are busy; (small|mid) refused: NO_ROOM/);
  });

  it('the count asked is capped by maxReplicas, and the answer says so', async () => {
    mesh = new Mesh({ max: 2 });
    for (const id of ['a', 'b', 'c']) mesh.host(id);
    const answer = await requests().load(mesh.model, { replicas: 3 });
    expect(answer.loaded).toHaveLength(2);
    expect(answer.note).toBe('2 replicas (3 asked; maxReplicas is 2)');
  });

  it('an unload answers with the report its agent sent right behind it, in the same millisecond, not a heartbeat later', async () => {
    mesh = new Mesh({ min: 0 });
    const host = mesh.host('a', { resident: true });
    host.devices = [{ ...host.devices[0]!, usedMB: 100 }];
    mesh.silent.add('a');
    // Half a minute between heartbeats, on a clock that does not move: only the report sent after the unload can answer.
    const unloading = new ReplicaRequests({ autoscaler: mesh.autoscaler, hosts: mesh.hosts, events: mesh.events, clock: mesh.clock, heartbeatMs: 30_000 }).unload('gen');
    expect(mesh.of('a', 'unload')).toHaveLength(1);
    // What the agent hub does with the agent's `unloaded` and the heartbeat the agent sends right after it.
    host.unloaded('gen');
    mesh.events.publishMesh({ type: 'replica:unloaded', host: 'a', model: 'gen', device: 'cpu', at: new Date(mesh.clock.now()).toISOString() });
    host.devices = [{ ...host.devices[0]!, usedMB: 0 }];
    const answer = await Promise.race([unloading, new Promise((resolve) => setTimeout(() => resolve('still waiting for a heartbeat'), 2000))]);
    expect(answer).toEqual([expect.objectContaining({
      host: 'a', change: 'unloaded', before: [expect.objectContaining({ usedMB: 100 })], after: [expect.objectContaining({ usedMB: 0 })],
    })]);
  });

  it('notes: how many of how many, and every reason', () => {
    const plan = { wanted: 3, asked: 3, max: null, hosts: ['a', 'b'] };
    expect(loadNote(plan, 2, [], [])).toBe('2 of 3 replicas: only 2 hosts can serve it');
    expect(loadNote({ ...plan, hosts: ['a'] }, 1, [], [])).toBe('1 of 3 replicas: only 1 host can serve it');
    expect(loadNote(plan, 1, ['b refused: NO_ROOM: full'], [])).toBe('1 of 3 replicas: only 2 hosts can serve it; b refused: NO_ROOM: full');
    expect(loadNote({ ...plan, hosts: ['a', 'b', 'c'] }, 2, [], ['c'])).toBe('2 of 3 replicas: c did not answer in time (still loading: see gpumesh status)');
    expect(loadNote({ ...plan, asked: 5, max: 3, hosts: ['a', 'b', 'c'] }, 3, [], [])).toBe('3 replicas (5 asked; maxReplicas is 3)');
    expect(loadNote(plan, 3, [], [])).toBeNull();
  });
});
