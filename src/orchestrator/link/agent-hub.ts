import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import { AgentMessage, LINK_CLOSE, LINK_PROTOCOL_VERSION, MeshError, type OrchestratorMessage } from '../../protocol/index.js';
import type { VerifiedGrant } from '../auth/index.js';
import type { Clock, Timer } from '../clock.js';
import type { JobLifecycle } from '../jobs/index.js';
import { HostSession } from '../routing/index.js';
import type { Scheduler } from '../scheduler/index.js';

type Hello = Extract<AgentMessage, { type: 'hello' }>;

export interface AgentHubDeps {
  clock: Clock;
  lifecycle: JobLifecycle;
  scheduler: Scheduler;
  log: Logger;
  heartbeatMs: number;
  staleAfterMs: number;
  /** Throws if the grant may not join as this host with these classes. */
  authorizeJoin(grant: VerifiedGrant, hello: Hello): void;
  onChange?(): void;
}

const HELLO_TIMEOUT_MS = 10_000;

/**
 * The orchestrator's end of the agent links: admits agents by their hello and
 * grant, feeds their reports to the job lifecycle, and declares a host lost
 * when its socket closes or its heartbeats stop.
 */
export class AgentHub {
  readonly #deps: AgentHubDeps;
  readonly #hosts = new Map<string, { session: HostSession; socket: WebSocket }>();
  #sweep: Timer;
  #closed = false;

  constructor(deps: AgentHubDeps) {
    this.#deps = deps;
    this.#sweep = this.#armSweep();
  }

  hosts(): IterableIterator<HostSession> {
    return [...this.#hosts.values()].map((entry) => entry.session)[Symbol.iterator]();
  }

  get size(): number {
    return this.#hosts.size;
  }

  get(id: string): HostSession | undefined {
    return this.#hosts.get(id)?.session;
  }

  /** Take a freshly upgraded socket; it becomes a host once its hello is accepted. */
  attach(socket: WebSocket, grant: VerifiedGrant): void {
    let session: HostSession | null = null;
    const helloTimer = this.#deps.clock.setTimer(HELLO_TIMEOUT_MS, () => socket.close(LINK_CLOSE.rejected, 'no hello'));
    socket.on('message', (data, isBinary) => {
      if (isBinary) return socket.close(LINK_CLOSE.binary, 'binary frames are not part of the link protocol');
      let message: AgentMessage;
      try {
        const parsed = AgentMessage.safeParse(JSON.parse(data.toString()));
        if (!parsed.success) throw new Error(parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; '));
        message = parsed.data;
      } catch (error) {
        this.#deps.log.warn({ err: error }, 'malformed link message');
        return socket.close(LINK_CLOSE.malformed, 'malformed message');
      }
      if (!session) {
        helloTimer.cancel();
        if (message.type !== 'hello') return socket.close(LINK_CLOSE.rejected, 'the first message must be hello');
        session = this.#admit(socket, grant, message);
        return;
      }
      this.#handle(session, message);
    });
    socket.on('close', () => {
      helloTimer.cancel();
      if (session) this.#lost(session, socket);
    });
    socket.on('error', (error) => this.#deps.log.warn({ err: error }, 'agent link error'));
  }

  #admit(socket: WebSocket, grant: VerifiedGrant, hello: Hello): HostSession | null {
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
    const { clock, lifecycle, log } = this.#deps;
    const send = (message: OrchestratorMessage): void => {
      // Write errors surface as a close event, which fails the host over; nothing to do here.
      if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(message));
    };
    const session = new HostSession(
      {
        id: hello.host, classes: hello.classes, devices: hello.devices, engines: hello.engines,
        concurrency: hello.concurrency, version: hello.version, cachedModels: hello.models,
      },
      randomBytes(8).toString('hex'), clock.now(), send,
    );
    const previous = this.#hosts.get(hello.host);
    this.#hosts.set(hello.host, { session, socket });
    if (previous) {
      previous.socket.close(LINK_CLOSE.replaced, 'replaced by a newer connection');
      lifecycle.hostLost(previous.session, { session, inFlight: hello.inFlight });
    }
    lifecycle.claim(session, hello.inFlight);
    send({ type: 'welcome', session: session.session, heartbeatMs: this.#deps.heartbeatMs, protocol: LINK_PROTOCOL_VERSION });
    log.info({ host: hello.host, classes: hello.classes, devices: hello.devices.length, inFlight: hello.inFlight.length }, 'agent joined');
    this.#deps.scheduler.requestPump();
    this.#deps.onChange?.();
    return session;
  }

  #handle(session: HostSession, message: AgentMessage): void {
    const { lifecycle, clock } = this.#deps;
    session.lastSeenAt = clock.now();
    switch (message.type) {
      case 'hello':
        return; // only the first hello counts
      case 'heartbeat':
        session.resident = message.resident;
        session.devices = message.devices;
        return;
      case 'started':
        return lifecycle.started(session, message.batchId, message.jobIds);
      case 'progress':
        return lifecycle.progress(message.batchId, message.jobIds, message.step, message.total);
      case 'done':
        return lifecycle.done(session, message);
      case 'failed':
        return lifecycle.failed(session, message);
      case 'loaded':
        session.resident = [
          ...session.resident.filter((entry) => entry.model !== message.model),
          { model: message.model, digest: message.digest, device: message.device, memoryMB: message.memoryMB, lastUsedAt: clock.now() },
        ];
        return;
      case 'unloaded':
        session.resident = session.resident.filter((entry) => entry.model !== message.model);
        return;
    }
  }

  #lost(session: HostSession, socket: WebSocket): void {
    const current = this.#hosts.get(session.id);
    if (current?.socket !== socket) return; // a newer connection already took over
    this.#hosts.delete(session.id);
    this.#deps.log.warn({ host: session.id, batches: session.batches.size }, 'agent lost');
    this.#deps.lifecycle.hostLost(session);
    this.#deps.scheduler.requestPump();
    this.#deps.onChange?.();
  }

  #armSweep(): Timer {
    return this.#deps.clock.setTimer(this.#deps.heartbeatMs, () => {
      if (this.#closed) return;
      const now = this.#deps.clock.now();
      for (const { session, socket } of this.#hosts.values()) {
        if (now - session.lastSeenAt > this.#deps.staleAfterMs) {
          this.#deps.log.warn({ host: session.id, silentMs: now - session.lastSeenAt }, 'agent stopped reporting');
          socket.terminate();
        }
      }
      this.#sweep = this.#armSweep();
    });
  }

  /** Tell agents we are going away and close their links. */
  close(): void {
    this.#closed = true;
    this.#sweep.cancel();
    for (const { socket } of this.#hosts.values()) socket.close(LINK_CLOSE.shuttingDown, 'orchestrator shutting down');
  }
}
