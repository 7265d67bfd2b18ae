import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { LINK_CLOSE, LINK_LIMITS, LINK_PROTOCOL_VERSION, type OrchestratorMessage } from '../../../src/protocol/index.js';
import { GrantAuthority, GrantLifetimes, type VerifiedGrant } from '../../../src/orchestrator/auth/index.js';
import { AgentHub, type AgentHubDeps, type LinkSocket } from '../../../src/orchestrator/link/agent-hub.js';
import { JobCoreHarness } from '../../helpers/job-core.js';

/** A WebSocket stand-in: what the hub sends lands in `sent`, closes are recorded, and the test plays the agent. */
class FakeSocket extends EventEmitter {
  readonly OPEN = 1;
  readyState = 1;
  readonly sent: OrchestratorMessage[] = [];
  closed: { code: number; reason: string } | null = null;
  terminated = false;

  send(data: string): void {
    this.sent.push(JSON.parse(data) as OrchestratorMessage);
  }

  close(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = { code, reason };
    this.readyState = 3;
    this.emit('close', code, Buffer.from(reason));
  }

  terminate(): void {
    this.terminated = true;
    this.close(1006, '');
  }

  say(message: unknown): void {
    this.emit('message', Buffer.from(JSON.stringify(message)), false);
  }
}

const hello = (host = 'laptop') => ({
  type: 'hello', protocol: LINK_PROTOCOL_VERSION, host, classes: ['image'], engines: ['onnx'], models: [], inFlight: [],
  devices: [{ id: 'cpu', kind: 'cpu', name: 'fake', memoryTotalMB: 8192, budgetMB: 4096, usedMB: 0 }], concurrency: 1, version: 'test',
});

let harness: JobCoreHarness;
let hub: AgentHub;
let refusals: { host: string; model: string; code: string }[] = [];
let authority: GrantAuthority;
afterEach(() => {
  hub?.close();
  harness?.close();
});

const lost: { host: string; reason: string; abnormal: boolean }[] = [];

function setup(options: ConstructorParameters<typeof JobCoreHarness>[0] & { hub?: Partial<AgentHubDeps> } = {}): void {
  harness = new JobCoreHarness(options);
  lost.length = 0;
  authority = new GrantAuthority(randomBytes(32), 'http://test');
  const lifetimes = new GrantLifetimes(authority, harness.clock);
  hub = new AgentHub({
    clock: harness.clock, hosts: harness.hosts, intake: harness.core.intake, failover: harness.core.failover, recovery: harness.core.recovery,
    events: harness.events, log: pino({ level: 'silent' }), heartbeatMs: 1_000, staleAfterMs: 3_000, helloTimeoutMs: 2_000, inlineOutputBytes: 1024,
    refusals: harness.core.refusals, budget: { perSecond: 10_000, burst: 20_000, closeAfterMs: 2_000 }, ...options.hub,
    authorizeJoin: () => {},
    onLoadRefused: (host, model, error) => refusals.push({ host: host.id, model, code: error.code }),
    watchGrant: (grant, onEnd) => lifetimes.watch(grant, onEnd),
    // Wired as the orchestrator wires them: probes claim their reports; the host breakers count links that drop.
    observers: [
      { claims: (session, message) => harness.prober.claims(session, message), lost: (session) => harness.prober.hostLost(session) },
      {
        lost: (session, reason, abnormal) => {
          lost.push({ host: session.id, reason, abnormal });
          if (abnormal) harness.breakers.linkLost(session.id, reason);
        },
      },
    ],
  });
  refusals = [];
}

/** A real agent grant (signed, verified) for the hub to watch. */
const agentGrant = (caveats: string[] = []): { id: string; grant: VerifiedGrant } => {
  const minted = authority.mint('agent', ['host laptop', ...caveats]);
  return { id: minted.id, grant: authority.verify(minted.token, harness.clock.now()) };
};

const attach = (grant: VerifiedGrant = agentGrant().grant): FakeSocket => {
  const socket = new FakeSocket();
  hub.attach(socket as unknown as LinkSocket, grant);
  return socket;
};

describe('AgentHub (fake clock, fake sockets)', () => {
  it('closes a socket that says no hello within the timeout, with a code that lets the agent redial', () => {
    setup();
    const silent = attach();
    harness.clock.advance(1_999);
    expect(silent.closed).toBeNull();
    harness.clock.advance(1);
    expect(silent.closed).toEqual({ code: LINK_CLOSE.noHello, reason: 'no hello' });
    const prompt = attach();
    prompt.say(hello());
    harness.clock.advance(2_000);
    expect(prompt.closed).toBeNull();
    expect(prompt.sent[0]).toMatchObject({ type: 'welcome', protocol: LINK_PROTOCOL_VERSION });
  });

  it('drops a host whose heartbeats stop, fails its work over, and keeps one that reports', async () => {
    setup();
    const quiet = attach();
    quiet.say(hello('quiet'));
    const job = harness.submit();
    await harness.settle();
    expect(quiet.sent.filter((message) => message.type === 'run')).toHaveLength(1);
    const chatty = attach();
    chatty.say(hello('chatty'));
    for (let second = 1; second <= 4; second++) {
      chatty.say({ type: 'heartbeat', resident: [], devices: hello().devices });
      harness.clock.advance(1_000);
    }
    expect(quiet.closed?.code).toBe(LINK_CLOSE.stale);
    expect(quiet.terminated).toBe(true);
    expect(chatty.closed).toBeNull();
    expect([...harness.hosts].map((host) => host.id)).toEqual(['chatty']);
    expect(harness.seen.some((scoped) => scoped.kind === 'mesh' && scoped.event.type === 'host:lost' && scoped.event.host === 'quiet')).toBe(true);
    // Its job was retried (after the backoff) on the host that kept reporting.
    await harness.settle();
    harness.clock.advance(100);
    await harness.settle();
    const run = chatty.sent.find((message) => message.type === 'run');
    expect(run?.type === 'run' && run.jobs[0]!.id).toBe(job.id);
  });

  it('drops a silent host the moment its silence passes staleAfterMs, not at the next heartbeat tick; the welcome says how long that is', () => {
    setup();
    harness.clock.advance(400); // out of step with the hub's heartbeat ticks
    const quiet = attach();
    quiet.say(hello('quiet'));
    expect(quiet.sent[0]).toMatchObject({ type: 'welcome', heartbeatMs: 1_000, staleAfterMs: 3_000 });
    harness.clock.advance(3_000);
    expect(quiet.closed).toBeNull();
    // One tick past 3 s of silence; a sweep only on the heartbeat ticks would have waited 600 ms more.
    harness.clock.advance(1);
    expect(quiet.closed?.code).toBe(LINK_CLOSE.stale);
    expect(lost).toEqual([{ host: 'quiet', reason: 'no heartbeat for 3001 ms', abnormal: true }]);
  });

  it('a new connection of the same host replaces the old one, which is closed as replaced', () => {
    setup();
    const first = attach();
    first.say(hello());
    const second = attach();
    second.say(hello());
    expect(first.closed?.code).toBe(LINK_CLOSE.replaced);
    expect(harness.hosts.size).toBe(1);
    expect(harness.hosts.get('laptop')).toBeDefined();
    second.close(1000, 'bye');
    expect(harness.hosts.size).toBe(0);
  });

  it('links that drop (no close frame, heartbeats stopped, replaced) count against the host\'s breaker; a clean close does not', () => {
    setup({ breakers: { failuresToOpen: 3 } });
    const clean = attach();
    clean.say(hello());
    clean.close(1000, 'agent shutting down');
    const dropped = attach();
    dropped.say(hello());
    dropped.close(1006, '');
    const replaced = attach();
    replaced.say(hello());
    attach().say(hello());
    expect(lost[0]).toEqual({ host: 'laptop', reason: 'link closed', abnormal: false });
    expect(lost.filter((entry) => entry.abnormal)).toEqual([
      { host: 'laptop', reason: 'link dropped', abnormal: true },
      { host: 'laptop', reason: 'replaced by a newer connection', abnormal: true },
    ]);
    expect(harness.breakers.view('laptop', null)).toMatchObject({ state: 'closed', consecutiveFailures: 2 });
    harness.clock.advance(4_000); // the newest connection says nothing: dropped as stale
    expect(lost.at(-1)).toMatchObject({ reason: expect.stringMatching(/^no heartbeat for/), abnormal: true });
    expect(harness.breakers.state('laptop', null)).toBe('open');
    expect(harness.router.route(harness.models.get('gen')!, { classes: ['image'], hosts: null }).skipped).toEqual([{ host: 'laptop', class: 'image', reason: 'disconnected' }]);
  });

  it('a probe\'s reports go to the prober, never to the job roles', async () => {
    setup({ breakers: { failuresToOpen: 1, openForS: 1, successesToClose: 1 } });
    const socket = attach();
    socket.say(hello());
    socket.say({ type: 'loaded', model: 'gen', digest: 'sha256:x', device: 'cpu', memoryMB: 64 });
    harness.breakers.failure('laptop', 'gen', 'ENGINE_CRASHED');
    harness.clock.advance(1_000);
    await harness.settle();
    const probe = socket.sent.find((message) => message.type === 'run');
    expect(probe?.type === 'run' && probe.probe).toBe(true);
    if (probe?.type !== 'run') return;
    socket.say({ type: 'started', batchId: probe.batchId, jobIds: [probe.jobs[0]!.id] });
    socket.say({ type: 'done', jobId: probe.jobs[0]!.id, batchId: probe.batchId, artifacts: [], timings: { loadMs: 0, computeMs: 3, totalMs: 3 } });
    await harness.settle();
    expect(harness.breakers.state('laptop', 'gen')).toBe('closed');
    expect(harness.seen.filter((scoped) => scoped.kind === 'mesh' && scoped.event.type === 'link:refused')).toEqual([]);
    expect(socket.sent.filter((message) => message.type === 'ack').flatMap((ack) => (ack.type === 'ack' ? ack.jobIds : []))).toEqual([probe.jobs[0]!.id]);
  });

  it('refuses a first message that is not hello, and closes on a malformed one', () => {
    setup();
    const rude = attach();
    rude.say({ type: 'heartbeat', resident: [], devices: [] });
    expect(rude.closed?.code).toBe(LINK_CLOSE.rejected);
    const garbled = attach();
    garbled.say(hello());
    garbled.say({ type: 'progress', batchId: 1 });
    expect(garbled.closed?.code).toBe(1008);
  });

  it('counts what a reconnecting agent still holds at once, and passes load refusals on', () => {
    setup();
    const socket = attach();
    const resident = [{ model: 'gen', digest: `sha256:${'a'.repeat(64)}`, device: 'cpu', memoryMB: 64, lastUsedAt: 1 }];
    socket.say({ ...hello(), resident });
    const session = harness.hosts.get('laptop')!;
    expect(session.hasReadyReplica('gen')).toBe(true);
    expect(session.draining).toBe(false);
    socket.say({ type: 'load-refused', model: 'gen', error: { code: 'NO_ROOM', message: 'full' } });
    expect(refusals).toEqual([{ host: 'laptop', model: 'gen', code: 'NO_ROOM' }]);
  });

  it('a model loaded or unloaded is a replica:loaded / replica:unloaded mesh event (the mesh view\'s memory bars follow them)', () => {
    setup();
    const socket = attach();
    socket.say(hello());
    socket.say({ type: 'loaded', model: 'gen', digest: `sha256:${'b'.repeat(64)}`, device: 'cpu', memoryMB: 96 });
    expect(harness.hosts.get('laptop')!.isResident('gen')).toBe(true);
    socket.say({ type: 'unloaded', model: 'gen', digest: `sha256:${'b'.repeat(64)}`, device: 'cpu' });
    expect(harness.hosts.get('laptop')!.isResident('gen')).toBe(false);
    const replicaEvents = harness.seen.flatMap((scoped) => (scoped.kind === 'mesh' && scoped.event.type.startsWith('replica:') ? [scoped.event] : []));
    const at = new Date(harness.clock.now()).toISOString();
    expect(replicaEvents).toEqual([
      { type: 'replica:loaded', host: 'laptop', model: 'gen', device: 'cpu', memoryMB: 96, at },
      { type: 'replica:unloaded', host: 'laptop', model: 'gen', device: 'cpu', at },
    ]);
  });

  it('a draining agent gets no new work; when it closes normally it left, and nothing fails over', async () => {
    setup();
    const leaving = attach();
    leaving.say(hello('leaving'));
    const job = harness.submit();
    await harness.settle();
    const run = leaving.sent.find((message) => message.type === 'run');
    expect(run).toBeDefined();
    leaving.say({ type: 'draining' });
    expect(harness.hosts.get('leaving')!.draining).toBe(true);
    expect(harness.seen.some((scoped) => scoped.kind === 'mesh' && scoped.event.type === 'host:draining' && scoped.event.jobsInFlight === 1)).toBe(true);
    const next = harness.submit();
    await harness.settle();
    expect(leaving.sent.filter((message) => message.type === 'run')).toHaveLength(1);
    // It finishes what it holds; the result is acknowledged; then it closes with 1000.
    if (run?.type !== 'run') throw new Error('no run');
    leaving.say({ type: 'started', batchId: run.batchId, jobIds: [job.id] });
    leaving.say({ type: 'done', jobId: job.id, batchId: run.batchId, artifacts: [], result: { ok: true }, timings: { loadMs: 0, computeMs: 1, totalMs: 1 } });
    await harness.settle();
    expect(harness.status(job.id)).toBe('succeeded');
    leaving.close(1000, 'agent shutting down');
    const mesh = harness.seen.flatMap((scoped) => (scoped.kind === 'mesh' ? [scoped.event.type] : []));
    expect(mesh).toContain('host:left');
    expect(mesh).not.toContain('host:lost');
    expect(harness.status(next.id)).toBe('queued');
    // A host that joins takes the queued job.
    const other = attach();
    other.say(hello('other'));
    await harness.settle();
    expect(other.sent.some((message) => message.type === 'run')).toBe(true);
  });

  it('drain(host) tells the agent and marks it at once; an unknown host is null', () => {
    setup();
    const socket = attach();
    socket.say({ ...hello(), draining: false });
    expect(hub.drain('nobody')).toBeNull();
    const session = hub.drain('laptop');
    expect(session?.draining).toBe(true);
    expect(socket.sent.filter((message) => message.type === 'drain')).toHaveLength(1);
    hub.drain('laptop');
    expect(socket.sent.filter((message) => message.type === 'drain')).toHaveLength(1);
    // A reconnect mid-drain says so in its hello.
    const again = attach();
    again.say({ ...hello(), draining: true });
    expect(harness.hosts.get('laptop')!.draining).toBe(true);
  });

  it('revoking the grant of a connected agent closes its link as refused and fails its work over at once', async () => {
    setup();
    const revokedGrant = agentGrant();
    const doomed = attach(revokedGrant.grant);
    doomed.say(hello('doomed'));
    const job = harness.submit();
    await harness.settle();
    expect(doomed.sent.filter((message) => message.type === 'run')).toHaveLength(1);
    const honest = attach();
    honest.say(hello('honest'));

    authority.revoke(revokedGrant.id);
    expect(doomed.closed).toEqual({ code: LINK_CLOSE.rejected, reason: 'grant revoked' });
    expect([...harness.hosts].map((host) => host.id)).toEqual(['honest']);
    expect(harness.seen.some((scoped) => scoped.kind === 'mesh' && scoped.event.type === 'host:lost' && scoped.event.host === 'doomed' && scoped.event.reason === 'grant revoked')).toBe(true);
    // Its job moves to the other host after the retry backoff; no heartbeat timeout is waited for.
    await harness.settle();
    harness.clock.advance(100);
    await harness.settle();
    const run = honest.sent.find((message) => message.type === 'run');
    expect(run?.type === 'run' && run.jobs[0]!.id).toBe(job.id);
    expect(honest.closed).toBeNull();
  });

  it('an agent link ends when its grant expires', () => {
    setup();
    const { grant } = agentGrant([`time-before ${new Date(harness.clock.now() + 2_500).toISOString()}`]);
    const socket = attach(grant);
    socket.say(hello());
    harness.clock.advance(2_499);
    expect(socket.closed).toBeNull();
    harness.clock.advance(1);
    expect(socket.closed).toEqual({ code: LINK_CLOSE.rejected, reason: 'grant expired' });
    expect(harness.hosts.size).toBe(0);
  });

  it('one message naming many jobs the host does not hold is refused once, with the count: one event, no read of the store', async () => {
    setup();
    const rogue = attach();
    rogue.say(hello('rogue'));
    const job = harness.submit();
    await harness.settle();
    const run = rogue.sent.find((message) => message.type === 'run');
    if (run?.type !== 'run') throw new Error('no run');
    const strangers = Array.from({ length: LINK_LIMITS.jobIdsPerMessage - 1 }, (_, i) => `j_stranger_${i}`);
    rogue.say({ type: 'progress', batchId: run.batchId, jobIds: [job.id, ...strangers], step: 1, total: 2 });
    const refused = harness.meshEvents('link:refused');
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ host: 'rogue', what: 'progress', count: strangers.length, jobId: strangers[0] });
    expect((refused[0] as { jobIds: string[] }).jobIds).toEqual(strangers.slice(0, 10));
    // The job it does hold moved on as usual.
    expect(harness.jobEvents(job.id)).toContain('progress');
    // More ids than a batch can hold is not a message of the protocol: the link is closed as malformed, unread.
    rogue.say({ type: 'progress', batchId: run.batchId, jobIds: [...strangers, 'one', 'two'], step: 1, total: 2 });
    expect(rogue.closed?.code).toBe(LINK_CLOSE.malformed);
    expect(harness.meshEvents('link:refused')).toHaveLength(1);
  });

  it('a link that keeps sending past its budget loses what is over it, then is closed (4429); within budget nothing is lost', () => {
    const closed: (string | null)[] = [];
    setup({ hub: { budget: { perSecond: 100, burst: 50, closeAfterMs: 500 }, onLinkClosed: (host) => closed.push(host), heartbeatMs: 10_000, staleAfterMs: 30_000 } });
    const steady = attach();
    steady.say(hello('steady'));
    const flood = attach();
    flood.say(hello('flood'));
    const heartbeat = { type: 'heartbeat', resident: [], devices: hello().devices };
    // 100 a second, as allowed, for three seconds: every one counts.
    for (let tick = 0; tick < 300; tick++) {
      steady.say(heartbeat);
      harness.clock.advance(10);
    }
    expect(steady.closed).toBeNull();
    // The flood: 1,000 messages a second. The burst goes through; the rest is dropped; after 500 ms over budget, closed.
    for (let tick = 0; tick < 100 && !flood.closed; tick++) {
      for (let i = 0; i < 10; i++) flood.say(heartbeat);
      harness.clock.advance(10);
    }
    expect(flood.closed).toEqual({ code: LINK_CLOSE.overBudget, reason: 'message rate over budget' });
    expect(closed).toEqual(['flood']);
    expect([...harness.hosts].map((host) => host.id)).toEqual(['steady']);
  });

  it('a host whose grant names models is sent only those; what it reports of others is refused and not counted', async () => {
    setup();
    const limited = attach(agentGrant(['models mlp']).grant);
    limited.say({ ...hello(), resident: [{ model: 'gen', digest: 'sha256:x', device: 'cpu', memoryMB: 64, lastUsedAt: 0 }] });
    expect(harness.hosts.get('laptop')!.resident).toEqual([]);
    limited.say({ type: 'loaded', model: 'gen', digest: 'sha256:x', device: 'cpu', memoryMB: 64 });
    limited.say({ type: 'heartbeat', resident: [{ model: 'gen', digest: 'sha256:x', device: 'cpu', memoryMB: 64, lastUsedAt: 0 }], devices: hello().devices });
    expect(harness.hosts.get('laptop')!.isResident('gen')).toBe(false);
    expect(harness.meshEvents('link:refused').map((event) => (event as { what: string }).what)).toEqual(['hello', 'loaded', 'heartbeat']);
    harness.submit();
    await harness.settle();
    harness.clock.advance(1_000);
    await harness.settle();
    expect(limited.sent.filter((message) => message.type === 'run' || message.type === 'load')).toEqual([]);
    expect(harness.router.route(harness.models.get('gen')!, { classes: ['image'], hosts: null }).skipped).toEqual([{ host: 'laptop', class: 'image', reason: 'model not granted' }]);
  });

  it('silence measured across a stall of the orchestrator\'s own event loop drops nobody: the messages that waited are read first', () => {
    setup();
    const talking = attach();
    talking.say(hello('talking'));
    const gone = attach();
    gone.say(hello('gone'));
    // Blocked for longer than the stale limit: when the sweep finally runs, both hosts look silent.
    harness.clock.stall(5_000);
    harness.clock.advance(0);
    expect(talking.closed).toBeNull();
    expect(gone.closed).toBeNull();
    // What waited in its socket is read; the next look judges the silence that is real.
    talking.say({ type: 'heartbeat', resident: [], devices: hello().devices });
    harness.clock.advance(25);
    expect(talking.closed).toBeNull();
    expect(gone.closed?.code).toBe(LINK_CLOSE.stale);
  });
});
