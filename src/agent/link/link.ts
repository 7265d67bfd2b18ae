import type { Writable } from 'node:stream';
import type { Logger } from 'pino';
import WebSocket from 'ws';
import {
  LINK_CLOSE, LINK_PATH, OrchestratorMessage, type AgentMessage,
} from '../../protocol/index.js';
import { Backoff } from '../../net/backoff.js';
import { corkForTick } from '../../net/cork.js';
import { readLinkMessage, sendLinkMessage, type ClonedMessage, type LinkEnd } from '../../net/memory-link.js';
import { TlsPinError, type ServerTrust } from '../../tls-client/index.js';
import { workClock, type Clock, type Timer } from '../../protocol/clock.js';
import { LinkWatchdog } from './link-watchdog.js';

type Hello = Extract<AgentMessage, { type: 'hello' }>;
type Welcome = Extract<OrchestratorMessage, { type: 'welcome' }>;

/** What the link uses of a WebSocket: ws's own, or one end of an in-process link (net/memory-link.ts). */
export interface AgentSocket extends LinkEnd {
  ping(): void;
  on(event: 'pong', listener: () => void): unknown;
  on(event: 'message', listener: (data: { toString(): string } | ClonedMessage) => void): unknown;
  on(event: 'close', listener: (code: number, reason: { toString(): string }) => void): unknown;
}

/** One orchestrator the agent may link to: its base URL (http or https) and how to trust its certificate. */
export interface LinkTarget {
  url: string;
  /** An https URL with a pinned CA gives wss: verified against that CA alone (fetched from this URL). */
  trust: ServerTrust;
}

export interface AgentLinkOptions {
  /**
   * The orchestrators to dial: one, or several sharing one store (one active, the others standbys that refuse the
   * link). A dial that fails goes on to the next at once; the backoff is waited once per round of them all.
   */
  targets: readonly LinkTarget[];
  /**
   * Dial in-process instead: the link's other end is an orchestrator in this process (`gpumesh up`), which
   * has checked the grant already. Throws if it refuses. Default: a WebSocket to the targets.
   */
  connect?: () => AgentSocket;
  grant: string;
  log: Logger;
  /** Built fresh for each connection, so it carries the work in flight right now. */
  hello(): Hello;
  onWelcome(welcome: Welcome): void;
  onMessage(message: OrchestratorMessage): void;
  /**
   * The link ended for good: the orchestrator refused this agent (bad grant, host or classes), or the
   * agent refused the orchestrator (its TLS CA is not the pinned one). Reconnecting will not help.
   */
  onRejected(reason: string, by: 'orchestrator' | 'agent'): void;
  onDisconnected?(): void;
  /** Time for the redial backoff and the watchdog (a fake in tests). Default: real time. */
  clock?: Clock;
  /**
   * How long one dial may take, up to the upgrade's answer. Default 10 s with one target; 4 s with several, so a
   * host that went dark (no refusal, only silence) holds up reaching the next for seconds, not ten.
   */
  handshakeTimeoutMs?: number;
}

/** An orchestrator that does not say how long a silent link lasts (older than the field): this many heartbeats. */
const SILENT_HEARTBEATS = 3;

/**
 * The longest wait before another round when a standby answered in the last one. A standby takes over within its
 * lease (seconds) once the active orchestrator stops, and asking it again costs it one small answer; the backoff,
 * grown to 5 s by then, would add up to that much to a takeover.
 */
const STANDBY_ROUND_MS = 1000;

/**
 * The agent's end of the link: dials out (so it works behind NAT), says
 * hello, and redials with exponential backoff and jitter whenever the
 * connection drops — or goes silent (LinkWatchdog) — until it is closed or refused.
 *
 * With several orchestrators it goes round them: a dial that fails (refused, timed out, an upgrade answered with
 * anything but 101 — a standby's 503 NOT_LEADER —, or closed before the welcome) goes on to the next target at once,
 * and a link that drops redials starting with the next one. The backoff is waited before each round, not before each
 * target: a dead first orchestrator costs the time its refusal takes, not a backoff, on the way to a live second;
 * and after a round in which a standby answered, at most a second, since that standby is about to take over.
 */
export class AgentLink {
  readonly #options: AgentLinkOptions;
  /** Waits between rounds: 200 ms growing to 5 s, with jitter (a mesh's agents that lost it at once come back spread out). */
  readonly #backoff = new Backoff({ initialMs: 200, maxMs: 5000, jitter: true });
  /** The target being dialled, or linked to. */
  #index = 0;
  /** Dials that failed since the last round began; at the number of targets the round is over. */
  #failedThisRound = 0;
  /** A standby (503 NOT_LEADER) answered in this round: the next one comes soon (STANDBY_ROUND_MS). */
  #standbyThisRound = false;
  #socket: AgentSocket | null = null;
  /** The connection under the WebSocket, corked for a tick at each send. */
  #transport: Writable | null = null;
  /** The next dial, when one waits (a backoff, or the next target's turn). */
  #timer: Timer | null = null;
  #closed = false;
  /** Its host is asleep (the sleep policy): no dialling until `resume`. */
  #paused = false;
  #connected = false;
  /** Why the orchestrator refused the last dial (its HTTP answer), if it did. */
  #refused: string | null = null;

  constructor(options: AgentLinkOptions) {
    // An invariant: the CLI parses its URL list and refuses an empty one.
    if (options.targets.length === 0) throw new Error('AgentLink needs at least one orchestrator to dial');
    this.#options = options;
  }

  /** Redial timers keep the process alive (workClock): an agent waiting to relink is an agent at work. */
  get #clock(): Clock {
    return this.#options.clock ?? workClock;
  }

  get connected(): boolean {
    return this.#connected;
  }

  /** The orchestrator being dialled, or linked to: where model pulls and uploads go. */
  get target(): LinkTarget {
    return this.#options.targets[this.#index]!;
  }

  start(): void {
    this.#dial();
  }

  /** Send if connected; returns false when the message could not be sent. */
  send(message: AgentMessage): boolean {
    const socket = this.#socket;
    if (!this.#connected || !socket || socket.readyState !== socket.OPEN) return false;
    // The results of a batch, reported in one tick, leave in one write.
    if (this.#transport) corkForTick(this.#transport);
    sendLinkMessage(socket, message);
    return true;
  }

  close(): void {
    this.#closed = true;
    this.#timer?.cancel();
    this.#socket?.close(1000, 'agent shutting down');
  }

  /** The host goes to sleep: close the link normally (it said `asleep` first) and dial nothing until `resume`. */
  pause(): void {
    this.#paused = true;
    this.#timer?.cancel();
    this.#socket?.close(1000, 'host going to sleep');
  }

  /** The host woke: link again. */
  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.#dial();
  }

  #dial(): void {
    if (this.#closed || this.#paused) return;
    const { connect } = this.#options;
    if (connect) {
      let socket: AgentSocket;
      try {
        socket = connect();
      } catch (error) {
        this.#closed = true;
        this.#options.onRejected((error as Error).message, 'orchestrator');
        return;
      }
      this.#wire(socket);
      // In-process there is no handshake to wait for: the socket is open.
      sendLinkMessage(socket, this.#options.hello());
      return;
    }
    // The CA is pinned before the first byte of the grant goes out; a CA that is not the pinned one ends the agent
    // (every target is an orchestrator of the same mesh, pinned by the same grant: one that is not is an impostor or
    // a mistake, said loudly rather than skipped). A CA that cannot be fetched — a dead host, a standby — is a dial
    // that failed.
    const target = this.target;
    target.trust.ca().then((ca) => this.#open(target, ca), (error: unknown) => {
      if (this.#closed) return;
      if (error instanceof TlsPinError) {
        this.#closed = true;
        this.#options.onRejected(error.message, 'agent');
        return;
      }
      this.#failed({ reason: (error as Error).message });
    });
  }

  /** A dial failed before the welcome: on to the next target now, or, when every one failed this round, after the backoff. */
  #failed(why: Record<string, unknown>): void {
    if (this.#closed) return;
    const { targets, log } = this.#options;
    if (targets.length === 1) {
      this.#redial(why);
      return;
    }
    const failed = this.target.url;
    this.#index = (this.#index + 1) % targets.length;
    if (++this.#failedThisRound < targets.length) {
      log.info({ ...why, url: failed, next: this.target.url }, 'could not link to this orchestrator; trying the next');
      this.#timer = this.#clock.setTimer(0, () => this.#dial());
      return;
    }
    this.#redial({ ...why, url: failed, tried: targets.length });
  }

  /** Wait the backoff (at most STANDBY_ROUND_MS after a round that met a standby), then begin a round at the current target. */
  #redial(why: Record<string, unknown>): void {
    if (this.#closed) return;
    this.#failedThisRound = 0;
    const backoff = this.#backoff.next();
    const delay = this.#standbyThisRound ? Math.min(STANDBY_ROUND_MS, backoff) : backoff;
    this.#standbyThisRound = false;
    this.#options.log.info({ ...why, retryInMs: Math.round(delay), ...(this.#options.targets.length > 1 ? { next: this.target.url } : {}) }, 'link down; redialling');
    this.#timer = this.#clock.setTimer(delay, () => this.#dial());
  }

  #open(target: LinkTarget, ca: string | undefined): void {
    if (this.#closed) return;
    const { log, targets } = this.#options;
    const url = new URL(LINK_PATH, target.url);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const handshakeTimeout = this.#options.handshakeTimeoutMs ?? (targets.length > 1 ? 4000 : 10_000);
    const socket = new WebSocket(url, { headers: { authorization: `Bearer ${this.#options.grant}` }, handshakeTimeout, ca });
    socket.on('upgrade', (response) => {
      this.#transport = response.socket;
    });
    socket.on('open', () => {
      sendLinkMessage(socket, this.#options.hello());
    });
    socket.on('unexpected-response', (_request, response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => {
        const error = (() => {
          try { return (JSON.parse(body) as { error?: { code?: string; message?: string } }).error; } catch { return undefined; }
        })();
        const message = error?.message ?? body;
        if (response.statusCode === 401 || response.statusCode === 403) {
          this.#refused = `HTTP ${response.statusCode}: ${message}`;
          this.#options.onRejected(this.#refused, 'orchestrator');
          this.#closed = true;
        } else if (error?.code === 'NOT_LEADER') {
          // A standby of a mesh whose orchestrators share one store: expected, and the next target is tried.
          this.#standbyThisRound = true;
          log.info({ url: target.url, status: response.statusCode, code: error.code }, 'this orchestrator is a standby; not linking to it');
        } else {
          log.warn({ url: target.url, status: response.statusCode, code: error?.code, message }, 'orchestrator refused the link; will retry');
        }
        socket.terminate();
      });
    });
    socket.on('error', (error) => {
      // A close event always follows; the redial happens there. A TLS failure (a name the certificate
      // lacks, a chain the pinned CA did not sign) will not mend itself, so it is said loudly.
      const tls = target.trust.explain(error);
      if (tls) log.error({ err: error }, tls);
      else if (!this.#refused) log.debug({ err: error }, 'link error');
    });
    this.#wire(socket);
  }

  /** What a connection does, however it was made: the welcome, the watchdog, messages, and the redial when it closes. */
  #wire(socket: AgentSocket): void {
    const { log } = this.#options;
    this.#socket = socket;
    this.#transport = null;
    this.#refused = null;
    let watchdog: LinkWatchdog | null = null;
    socket.on('pong', () => watchdog?.heard());
    socket.on('message', (data) => {
      watchdog?.heard();
      let message: OrchestratorMessage;
      try {
        message = readLinkMessage(data, OrchestratorMessage);
      } catch (error) {
        log.warn({ err: error }, 'malformed message from the orchestrator');
        return;
      }
      if (message.type === 'welcome') {
        this.#connected = true;
        this.#backoff.reset();
        this.#failedThisRound = 0;
        log.info({ session: message.session, url: this.target.url }, 'linked to the orchestrator');
        const silentAfterMs = message.staleAfterMs ?? SILENT_HEARTBEATS * message.heartbeatMs;
        watchdog?.stop();
        watchdog = new LinkWatchdog(socket, {
          intervalMs: message.heartbeatMs, silentAfterMs,
          onSilent: (silentMs) => log.warn({ silentMs: Math.round(silentMs), silentAfterMs }, 'the orchestrator stopped answering; dropping the link'),
        }, this.#options.clock);
        this.#options.onWelcome(message);
        return;
      }
      this.#options.onMessage(message);
    });
    socket.on('close', (code, reason) => {
      watchdog?.stop();
      const wasConnected = this.#connected;
      this.#connected = false;
      this.#socket = null;
      if (code === LINK_CLOSE.rejected) {
        this.#closed = true;
        this.#options.onRejected(reason.toString() || 'rejected', 'orchestrator');
      }
      const why = { code, reason: reason.toString() };
      if (!wasConnected) {
        this.#failed(why);
        return;
      }
      this.#options.onDisconnected?.();
      // The orchestrator it was linked to may be gone: the next round starts with the next one (a standby taking over).
      const { targets } = this.#options;
      if (targets.length === 1) {
        this.#redial(why);
        return;
      }
      const dropped = this.target.url;
      this.#index = (this.#index + 1) % targets.length;
      this.#redial({ ...why, url: dropped });
    });
  }
}
