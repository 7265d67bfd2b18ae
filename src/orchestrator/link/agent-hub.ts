import { randomBytes } from 'node:crypto';
import type { Writable } from 'node:stream';
import type { Logger } from 'pino';
import { corkForTick } from '../../net/cork.js';
import { readLinkMessage, sendLinkMessage, type ClonedMessage, type LinkEnd } from '../../net/memory-link.js';
import { AgentMessage, LINK_CLOSE, LINK_PROTOCOL_VERSION, MeshError, type HostAway, type OrchestratorMessage, type ResidentModel } from '../../protocol/index.js';
import type { GrantEnd, VerifiedGrant } from '../auth/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { EventBus } from '../events/event-bus.js';
import type { Failover, Recovery, ResultIntake } from '../jobs/index.js';
import { hostCatalogue, HostSession, type BatchReport, type HostRegistry } from '../routing/index.js';
import { LinkBudget, type LinkBudgetSettings } from './link-budget.js';
import type { LinkRefusals } from '../jobs/refusals.js';

type Hello = Extract<AgentMessage, { type: 'hello' }>;
/** What an agent says about a pass-through relay (orchestrator/relay/). */
export type RelayReport = Extract<AgentMessage, { type: 'relay-head' | 'relay-data' | 'relay-credit' | 'relay-close' }>;

/** A part outside the job roles that watches the links (health probes, the host breakers). */
export interface LinkObserver {
  /** Take a report about a batch this part sent itself (a probe); true keeps it from the job roles. */
  claims?(session: HostSession, message: BatchReport): boolean;
  /**
   * A host session ended (its link closed, its heartbeats stopped, or a newer connection replaced it).
   * `abnormal` is false only when the agent closed the link cleanly (a close frame: it shut down on purpose).
   */
  lost?(session: HostSession, reason: string, abnormal: boolean): void;
}

export interface AgentHubDeps {
  clock: Clock;
  hosts: HostRegistry;
  intake: ResultIntake;
  failover: Failover;
  recovery: Recovery;
  events: EventBus;
  log: Logger;
  /** Tells of refused reports (models the host's grant does not allow), once per message. */
  refusals: LinkRefusals;
  /** Each dialled link's message budget (the in-process link of `gpumesh up`'s own agent has none: it is this program). */
  budget: LinkBudgetSettings;
  /** Counts links closed for their cost (over budget). */
  onLinkClosed?(host: string | null, reason: 'over-budget'): void;
  heartbeatMs: number;
  staleAfterMs: number;
  /** Largest output (per report) an agent may send inline in `done`. */
  inlineOutputBytes: number;
  /** How long acknowledgements may wait to ride along with the next message to their host (ms). Default 0: end of tick. */
  ackDelayMs?: number;
  /** How long a socket may stay open without saying hello. Default 10 s. */
  helloTimeoutMs?: number;
  /** Throws if the grant may not join as this host with these classes. */
  authorizeJoin(grant: VerifiedGrant, hello: Hello): void;
  /** Calls `onEnd` once when the grant is revoked or expires; returns a function that stops watching. */
  watchGrant(grant: VerifiedGrant, onEnd: (why: GrantEnd) => void): () => void;
  observers?: readonly LinkObserver[];
  /** An agent would not load a model it was asked to (the autoscaler tries another host). */
  onLoadRefused?(host: HostSession, model: string, error: { code: string; message: string }): void;
  /** The pass-through's relays: what agents say about them (each ends with its host's session, through `observers`). */
  relays?: { receive(session: HostSession, message: RelayReport): void };
}

/** Just enough of a WebSocket for the hub: ws's WebSocket, one end of an in-process link (net/memory-link.ts), or a fake in tests. */
export interface LinkSocket extends LinkEnd {
  on(event: 'message', listener: (data: { toString(): string } | ClonedMessage, isBinary: boolean) => void): unknown;
  on(event: 'close', listener: (code: number) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

const HELLO_TIMEOUT_MS = 10_000;
/** The sweep never runs more often than this, however many links come due together. */
const SWEEP_MIN_MS = 20;

/**
 * The orchestrator's end of the agent links: admits agents by their hello and
 * grant, passes their reports on (results to the intake, a lost host to
 * failover, what a reconnecting host still holds to recovery), and declares a
 * host lost when its socket closes or its heartbeats stop.
 */
export class AgentHub {
  readonly #deps: AgentHubDeps;
  readonly #sockets = new Map<HostSession, LinkSocket>();
  /** Each admitted link's budget, by session id: what it had refused is charged to it. */
  readonly #budgets = new Map<string, LinkBudget>();
  #sweep: Timer;
  #closed = false;

  constructor(deps: AgentHubDeps) {
    this.#deps = deps;
    this.#sweep = this.#armSweep();
    deps.refusals.onRefused((session, count) => this.#budgets.get(session)?.charge(deps.clock.now(), count));
  }

  /**
   * Take a freshly upgraded socket; it becomes a host once its hello is accepted. `transport` is the connection
   * under it: messages sent to the host in one tick leave in one write. `budgeted: false` exempts the link from the
   * message budget (the in-process link of this program's own agent).
   */
  attach(socket: LinkSocket, grant: VerifiedGrant, transport?: Writable, { budgeted = true } = {}): void {
    let session: HostSession | null = null;
    let grantEnded = false;
    let closedForCost = false;
    const budget = budgeted ? new LinkBudget(this.#deps.budget, this.#deps.clock.now()) : null;
    const helloTimer = this.#deps.clock.setTimer(this.#deps.helloTimeoutMs ?? HELLO_TIMEOUT_MS, () => socket.close(LINK_CLOSE.noHello, 'no hello'));
    // A link lasts no longer than its grant: once it is revoked (or expires) the host's work fails over at
    // once, nothing more it says counts, and the close code tells the agent that reconnecting will not help.
    const stopWatching = this.#deps.watchGrant(grant, (why) => {
      grantEnded = true;
      helloTimer.cancel();
      this.#deps.log.warn({ host: session?.id, grant: grant.id, why }, 'agent grant ended; closing its link');
      if (session) this.#lost(session, `grant ${why}`, false);
      socket.close(LINK_CLOSE.rejected, `grant ${why}`);
    });
    socket.on('message', (data, isBinary) => {
      if (grantEnded || closedForCost) return;
      // Counted before it is read: a message over the link's allowance costs nothing more.
      const verdict = budget?.take(this.#deps.clock.now()) ?? 'ok';
      if (verdict !== 'ok') {
        if (verdict === 'close') {
          closedForCost = true;
          this.#deps.log.warn({ host: session?.id, dropped: budget!.dropped, ...this.#deps.budget }, 'agent link kept exceeding its message budget; closing it');
          this.#deps.onLinkClosed?.(session?.id ?? null, 'over-budget');
          socket.close(LINK_CLOSE.overBudget, 'message rate over budget');
        }
        return;
      }
      if (isBinary) return socket.close(LINK_CLOSE.binary, 'binary frames are not part of the link protocol');
      let message: AgentMessage;
      try {
        message = readLinkMessage(data, AgentMessage);
      } catch (error) {
        this.#deps.log.warn({ err: error, host: session?.id }, 'malformed link message');
        return socket.close(LINK_CLOSE.malformed, 'malformed message');
      }
      if (!session) {
        helloTimer.cancel();
        if (message.type !== 'hello') return socket.close(LINK_CLOSE.rejected, 'the first message must be hello');
        session = this.#admit(socket, grant, message, transport);
        if (session && budget) this.#budgets.set(session.session, budget);
        return;
      }
      this.#handle(session, message);
    });
    socket.on('close', (code) => {
      helloTimer.cancel();
      stopWatching();
      if (!session) return;
      this.#budgets.delete(session.session);
      // A draining agent closes normally once its results are acknowledged: it left on purpose.
      // So does one that said it goes to sleep: recorded asleep, to be woken when work waits for it.
      if ((session.draining || session.away?.state === 'asleep') && code === 1000) this.#left(session);
      // 1006: the connection ended without a close frame (a crash, a dropped network), unlike an agent shutting down.
      else this.#lost(session, code === 1006 ? 'link dropped' : 'link closed', code === 1006);
    });
    socket.on('error', (error) => this.#deps.log.warn({ err: error }, 'agent link error'));
  }

  #admit(socket: LinkSocket, grant: VerifiedGrant, hello: Hello, transport: Writable | undefined): HostSession | null {
    try {
      if (hello.protocol !== LINK_PROTOCOL_VERSION) {
        throw new MeshError('AGENT_REJECTED', { host: hello.host, detail: `link protocol ${hello.protocol}; this orchestrator speaks ${LINK_PROTOCOL_VERSION}` });
      }
      this.#deps.authorizeJoin(grant, hello);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      this.#deps.log.warn({ host: hello.host, reason }, 'agent refused');
      socket.close(LINK_CLOSE.rejected, reason.slice(0, 120));
      return null;
    }
    const { clock, hosts, failover, recovery, log } = this.#deps;
    const send = (message: OrchestratorMessage): void => {
      // Write errors surface as a close event, which fails the host over; nothing to do here.
      if (socket.readyState !== socket.OPEN) return;
      if (transport) corkForTick(transport);
      sendLinkMessage(socket, message);
    };
    const session = new HostSession(
      {
        id: hello.host, classes: hello.classes, devices: hello.devices, engines: hello.engines, concurrency: hello.concurrency, version: hello.version,
        models: grant.models, unavailable: hello.unavailable, tools: hello.tools, engineUser: hello.engineUser,
        ...(hello.platform ? { platform: hello.platform } : {}), ...(hello.governance ? { governance: hello.governance } : {}),
        ...(hello.configured ? { configured: hello.configured } : {}), ...(hello.macs?.length ? { macs: hello.macs } : {}),
        ...(hello.passthrough?.length ? { passthrough: hello.passthrough } : {}),
      },
      hello.models, randomBytes(8).toString('hex'), clock.now(), send,
      this.#deps.ackDelayMs ? { clock, ms: this.#deps.ackDelayMs } : null,
    );
    // What it still holds after a reconnect counts at once, not only from its first heartbeat.
    session.resident = this.#granted(session, 'hello', hello.resident ?? []);
    session.draining = hello.draining ?? false;
    session.away = hello.away ?? null;
    const previous = hosts.get(hello.host);
    this.#sockets.set(session, socket);
    if (previous) {
      // The old session's work either moves to this one (it still holds it) or fails over.
      this.#sockets.get(previous)?.close(LINK_CLOSE.replaced, 'replaced by a newer connection');
      this.#sockets.delete(previous);
      failover.hostLost(previous, { session, held: hello.inFlight });
      // The old link died without the orchestrator noticing: a link failure.
      for (const observer of this.#deps.observers ?? []) observer.lost?.(previous, 'replaced by a newer connection', true);
    }
    recovery.claim(session, hello.inFlight);
    send({
      type: 'welcome', session: session.session, heartbeatMs: this.#deps.heartbeatMs, protocol: LINK_PROTOCOL_VERSION,
      inlineOutputBytes: this.#deps.inlineOutputBytes, staleAfterMs: this.#deps.staleAfterMs, freesSlotOnComputed: true, takesCatalogues: true,
    });
    log.info({ host: hello.host, classes: hello.classes, devices: hello.devices.length, held: hello.inFlight.length, unavailable: hello.unavailable }, 'agent joined');
    this.#deps.events.publishMesh({ type: 'host:joined', host: hello.host, classes: hello.classes, at: new Date(clock.now()).toISOString() });
    hosts.set(session);
    return session;
  }

  #handle(session: HostSession, message: AgentMessage): void {
    const { clock, hosts } = this.#deps;
    session.lastSeenAt = clock.now();
    switch (message.type) {
      case 'hello':
        return; // only the first hello counts
      case 'heartbeat':
        session.resident = this.#granted(session, 'heartbeat', message.resident);
        session.devices = message.devices;
        if (message.away !== undefined) this.#awayChanged(session, message.away);
        return;
      case 'computed':
        return this.#deps.intake.computed(session, message.batchId);
      case 'preview':
        return this.#deps.intake.preview(session, message.batchId, message.jobId, message.step, message.total, message.png);
      case 'loading':
      case 'started':
      case 'progress':
      case 'done':
      case 'failed':
        if (this.#deps.observers?.some((observer) => observer.claims?.(session, message))) return;
        return this.#report(session, message);
      case 'loaded':
        if (!session.mayServe(message.model)) return this.#deps.refusals.refuse(session, 'loaded', [message.model], 'about models its grant does not allow');
        session.loaded({ model: message.model, digest: message.digest, device: message.device, memoryMB: message.memoryMB, lastUsedAt: clock.now() });
        hosts.changed();
        this.#deps.events.publishMesh({
          type: 'replica:loaded', host: session.id, model: message.model, device: message.device, memoryMB: message.memoryMB, at: new Date(clock.now()).toISOString(),
        });
        return;
      case 'unloaded':
        if (!session.mayServe(message.model)) return this.#deps.refusals.refuse(session, 'unloaded', [message.model], 'about models its grant does not allow');
        session.unloaded(message.model);
        hosts.changed();
        this.#deps.events.publishMesh({ type: 'replica:unloaded', host: session.id, model: message.model, device: message.device, at: new Date(clock.now()).toISOString() });
        return;
      case 'load-refused':
        this.#deps.onLoadRefused?.(session, message.model, message.error);
        return;
      case 'draining':
        this.#markDraining(session, 'the agent is leaving');
        return;
      case 'relay-head':
      case 'relay-data':
      case 'relay-credit':
      case 'relay-close':
        return this.#deps.relays?.receive(session, message);
      case 'catalogue':
        if (!session.mayServe(message.model)) return this.#deps.refusals.refuse(session, 'catalogue', [message.model], 'about models its grant does not allow');
        session.catalogues.set(message.model, hostCatalogue(message.nodes));
        this.#deps.log.info({ host: session.id, model: message.model, nodeClasses: message.nodes ? Object.keys(message.nodes).length : null }, 'host takes workflows');
        // Workflow jobs that waited for a host with their nodes may go there now.
        hosts.changed();
        return;
      default:
        return unhandled(message);
    }
  }

  /** The resident models a host reports that its grant allows it; the rest are refused (and not counted as replicas). */
  #granted(session: HostSession, what: string, resident: readonly ResidentModel[]): ResidentModel[] {
    if (resident.every((entry) => session.mayServe(entry.model))) return [...resident];
    this.#deps.refusals.refuse(session, what, resident.filter((entry) => !session.mayServe(entry.model)).map((entry) => entry.model), 'about models its grant does not allow');
    return resident.filter((entry) => session.mayServe(entry.model));
  }

  #report(session: HostSession, message: BatchReport): void {
    const { intake } = this.#deps;
    switch (message.type) {
      case 'loading':
        return intake.loading(session, message.batchId, message.jobIds);
      case 'started':
        return intake.started(session, message.batchId, message.jobIds, message.loadMs, message.phases);
      case 'progress':
        return intake.progress(session, message.batchId, message.jobIds, message.step, message.total);
      case 'done':
        return intake.done(session, message);
      case 'failed':
        return intake.failed(session, message);
    }
  }

  /**
   * Drain a connected host (an admin asked): it gets nothing new from now on, finishes what it holds, and
   * leaves once its results are acknowledged. Returns the session, or null when no such host is connected.
   */
  drain(hostId: string): HostSession | null {
    const session = this.#deps.hosts.get(hostId);
    if (!session) return null;
    if (!session.draining) session.send({ type: 'drain' });
    this.#markDraining(session, 'an admin drained it');
    return session;
  }

  /** The host's agent says it takes no work now, and why (its owner, its hours, its heat), or that it takes work again. */
  #awayChanged(session: HostSession, away: HostAway | null): void {
    const before = session.away;
    if (before?.state === away?.state && before?.reason === away?.reason && before?.until === away?.until) return;
    session.away = away;
    const at = new Date(this.#deps.clock.now()).toISOString();
    const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());
    if (away) {
      this.#deps.log.info({ host: session.id, state: away.state, reason: away.reason }, 'host takes no work now');
      this.#deps.events.publishMesh({ type: 'host:away', host: session.id, state: away.state, reason: away.reason, since: iso(away.since)!, until: iso(away.until), at });
    } else {
      this.#deps.log.info({ host: session.id }, 'host takes work again');
      this.#deps.events.publishMesh({ type: 'host:back', host: session.id, at });
      // Queued work may go there again.
      this.#deps.hosts.changed();
    }
  }

  #markDraining(session: HostSession, why: string): void {
    if (session.draining) return;
    session.draining = true;
    this.#deps.log.info({ host: session.id, why, jobsInFlight: session.jobsInFlight }, 'host draining: no new work goes there');
    this.#deps.events.publishMesh({ type: 'host:draining', host: session.id, jobsInFlight: session.jobsInFlight, at: new Date(this.#deps.clock.now()).toISOString() });
    // Its replicas stop counting; the autoscaler may place them elsewhere.
    this.#deps.hosts.changed();
  }

  #left(session: HostSession): void {
    this.#sockets.delete(session);
    if (!this.#deps.hosts.delete(session, this.#deps.clock.now(), true)) return;
    this.#deps.log.info({ host: session.id }, 'agent drained and left');
    // Normally nothing: it left once everything it ran was acknowledged. Anything else fails over as for a lost host.
    if (session.batches.size > 0) this.#deps.failover.hostLost(session);
    for (const observer of this.#deps.observers ?? []) observer.lost?.(session, 'drained and left', false);
    this.#deps.events.publishMesh({ type: 'host:left', host: session.id, at: new Date(this.#deps.clock.now()).toISOString() });
  }

  #lost(session: HostSession, reason: string, abnormal: boolean): void {
    this.#sockets.delete(session);
    if (!this.#deps.hosts.delete(session, this.#deps.clock.now())) return; // a newer connection already took over
    this.#deps.log.warn({ host: session.id, batches: session.batches.size, reason }, 'agent lost');
    this.#deps.failover.hostLost(session);
    for (const observer of this.#deps.observers ?? []) observer.lost?.(session, reason, abnormal);
    this.#deps.events.publishMesh({ type: 'host:lost', host: session.id, reason, at: new Date(this.#deps.clock.now()).toISOString() });
  }

  /**
   * The next look at the links: when the quietest one would pass `staleAfterMs`, and at least once per heartbeat
   * interval. A host is dropped the moment its silence becomes conclusive rather than up to an interval later —
   * the time its jobs in flight wait before they are retried elsewhere (bench/failover.ts).
   */
  #armSweep(): Timer {
    const { clock, heartbeatMs, staleAfterMs } = this.#deps;
    const now = clock.now();
    let next = heartbeatMs;
    for (const session of this.#sockets.keys()) next = Math.min(next, session.lastSeenAt + staleAfterMs + 1 - now);
    const delay = Math.max(SWEEP_MIN_MS, next);
    const due = now + delay;
    return clock.setTimer(delay, () => {
      if (this.#closed) return;
      const now = this.#deps.clock.now();
      // The orchestrator itself was stalled (its event loop blocked for longer than a heartbeat): messages that arrived
      // meanwhile wait unread in the sockets, so silence measured across the stall says nothing about the hosts. Read
      // them first; judge at the next look.
      if (now - due > heartbeatMs) {
        this.#deps.log.warn({ lateMs: now - due }, 'the link sweep ran late (the event loop was blocked); judging silence at the next look');
        this.#sweep = this.#armSweep();
        return;
      }
      for (const [session, socket] of [...this.#sockets]) {
        if (now - session.lastSeenAt <= this.#deps.staleAfterMs) continue;
        this.#deps.log.warn({ host: session.id, silentMs: now - session.lastSeenAt }, 'agent stopped reporting');
        // Its work fails over now; the close frame tells the agent why if it is still listening, and terminate frees the socket.
        this.#lost(session, `no heartbeat for ${now - session.lastSeenAt} ms`, true);
        socket.close(LINK_CLOSE.stale, 'heartbeats stopped');
        socket.terminate();
      }
      this.#sweep = this.#armSweep();
    });
  }

  /** Tell agents we are going away and close their links. */
  close(): void {
    this.#closed = true;
    this.#sweep.cancel();
    for (const socket of this.#sockets.values()) socket.close(LINK_CLOSE.shuttingDown, 'orchestrator shutting down');
  }
}

/** Compile-time exhaustiveness: a new link message without a case here does not build (an invariant, so a bare Error). */
function unhandled(message: never): void {
  throw new Error(`unhandled link message ${JSON.stringify(message)}`);
}
