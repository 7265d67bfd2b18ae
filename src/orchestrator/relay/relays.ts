import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { MeshError, type ModelManifest, type RelayHeaders, type RelayRequest } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import { ReceiveWindow, RelayClosed, SendWindow } from '../../net/relay-flow.js';
import type { RelayReport } from '../link/agent-hub.js';
import type { HostSession } from '../routing/index.js';
import type { RelayKind, RelayMetrics, RelayOutcome } from './relay-metrics.js';

/** Where a relay goes: a connected host's session and the model whose ComfyUI it passes through. */
export interface RelayTarget {
  session: HostSession;
  manifest: ModelManifest;
}

export interface RelayFlags {
  end?: boolean;
  binary?: boolean;
  fin?: boolean;
}

/** How a relay ended: ComfyUI's side closed (a WebSocket's code and reason), or — with `error` — it failed. */
export interface RelayEnding {
  code?: number;
  reason?: string;
  error?: MeshError;
}

/** What the client's side of a relay is told (http-pipe.ts, socket-pipe.ts). */
export interface RelayListener {
  /** ComfyUI's answer began: an HTTP status and headers, or 101 when its WebSocket opened. */
  head(status: number, headers: RelayHeaders): void;
  /** Bytes from ComfyUI; call `handedOn` once they reached the client (the agent may then send that many more). */
  data(piece: Buffer, flags: RelayFlags, handedOn: () => void): void;
  /** The relay is over, from the host's side: see RelayEnding. Not called when the client's side ended it. */
  ended(ending: RelayEnding): void;
}

export interface RelaysDeps {
  clock: Clock;
  log: Logger;
  metrics: RelayMetrics;
  /** The most bytes one piece carries (the link's frame limit decides). */
  chunkBytes: number;
  /** What either side may send ahead of credit, per relay and direction. */
  windowBytes: number;
  /** Relays one host's link carries at once. */
  max: number;
  /** An HTTP relay that moves nothing this long fails. */
  idleMs: number;
}

/** Seconds a client is told to wait (Retry-After) when a host's link has no room for another relay. */
const BUSY_RETRY_S = 2;

/** The error codes an agent fails a relay with that the client sees as they are; any other is RELAY_FAILED. */
const AGENT_CODES = new Set(['PASSTHROUGH_NOT_FOUND', 'RELAY_UNAVAILABLE']);

/**
 * One relay, as the orchestrator holds it: bytes to the agent as the window allows (`send`), bytes from it checked
 * against the window this side granted, the relay's end told once, and — for HTTP — ended when nothing has moved for
 * `idleMs`.
 */
export class Relay {
  readonly id = `r${randomBytes(8).toString('hex')}`;
  readonly kind: RelayKind;
  readonly target: RelayTarget;
  readonly #deps: RelaysDeps;
  readonly #listener: RelayListener;
  readonly #window: SendWindow;
  readonly #received: ReceiveWindow;
  readonly #onEnd: () => void;
  #ended = false;
  readonly #openedAt: number;
  /** Bytes sent to the agent so far: where the next piece starts. */
  #sent = 0;
  #movedAt: number;
  #idle: Timer | null = null;

  constructor(deps: RelaysDeps, target: RelayTarget, kind: RelayKind, listener: RelayListener, onEnd: () => void) {
    this.#deps = deps;
    this.target = target;
    this.kind = kind;
    this.#listener = listener;
    this.#window = new SendWindow(deps.windowBytes);
    this.#received = new ReceiveWindow(deps.windowBytes);
    this.#onEnd = onEnd;
    this.#movedAt = deps.clock.now();
    this.#openedAt = this.#movedAt;
    if (kind === 'http') this.#armIdle(deps.idleMs);
  }

  get chunkBytes(): number {
    return this.#deps.chunkBytes;
  }

  get window(): SendWindow {
    return this.#window;
  }

  get ended(): boolean {
    return this.#ended;
  }

  get host(): string {
    return this.target.session.id;
  }

  get model(): string {
    return this.target.manifest.name;
  }

  /** Ask the agent to open the relay. */
  open(request: RelayRequest): void {
    const { chunkBytes, windowBytes } = this.#deps;
    this.target.session.send({ type: 'relay-open', relayId: this.id, model: this.target.manifest, request, chunkBytes, windowBytes });
  }

  /** A piece of the client's bytes to ComfyUI: send it once the window has taken its length (`window.take`). */
  sendPiece(piece: Buffer, flags: RelayFlags = {}): void {
    if (this.#ended) throw new RelayClosed('the relay is closed');
    this.#moved();
    this.#deps.metrics.moved('to-comfyui', piece.length);
    this.target.session.send({ type: 'relay-data', relayId: this.id, data: piece.toString('base64'), at: this.#sent, ...flags });
    this.#sent += piece.length;
  }

  /** The client's side is done with the relay: the agent is told, with a WebSocket's close code and reason. */
  close(outcome: RelayOutcome, code?: number, reason?: string): void {
    if (this.#ended) return;
    this.target.session.send({ type: 'relay-close', relayId: this.id, ...(code !== undefined ? { code } : {}), ...(reason ? { reason } : {}) });
    this.#finish(outcome);
  }

  /** The host's side failed or the relay cannot go on: the agent is told to stop, the listener hears why. */
  fail(error: MeshError): void {
    if (this.#ended) return;
    this.target.session.send({ type: 'relay-close', relayId: this.id });
    this.#end({ error }, 'failed');
  }

  /** What the agent said about this relay. */
  receive(message: RelayReport): void {
    if (this.#ended) return;
    this.#moved();
    switch (message.type) {
      case 'relay-head':
        return this.#listener.head(message.status, message.headers);
      case 'relay-credit':
        return this.#window.credit(message.bytes);
      case 'relay-data': {
        const piece = Buffer.from(message.data, 'base64');
        const broken = this.#received.received(piece.length, message.at);
        if (broken !== null) return this.fail(this.#error('RELAY_FAILED', `from the agent: ${broken}`));
        this.#deps.metrics.moved('from-comfyui', piece.length);
        const { end, binary, fin } = message;
        return this.#listener.data(piece, { ...(end ? { end } : {}), ...(binary ? { binary } : {}), ...(fin === false ? { fin } : {}) }, () => {
          this.#received.handedOn(piece.length);
          if (piece.length > 0 && !this.#ended) this.target.session.send({ type: 'relay-credit', relayId: this.id, bytes: piece.length });
        });
      }
      case 'relay-close': {
        if (!message.error) return this.#end({ ...(message.code !== undefined ? { code: message.code } : {}), ...(message.reason ? { reason: message.reason } : {}) }, 'answered');
        const code = AGENT_CODES.has(message.error.code) ? message.error.code as 'PASSTHROUGH_NOT_FOUND' | 'RELAY_UNAVAILABLE' : 'RELAY_FAILED';
        return this.#end({ error: this.#error(code, message.error.message) }, code === 'RELAY_FAILED' ? 'failed' : 'refused');
      }
    }
  }

  /** The host's link is gone: the relay fails (the client gets 502, or its WebSocket 1011). */
  lost(reason: string): void {
    this.#end({ error: this.#error('RELAY_FAILED', `the link to host ${this.host} ended (${reason})`) }, 'failed');
  }

  #error(code: 'PASSTHROUGH_NOT_FOUND' | 'RELAY_UNAVAILABLE' | 'RELAY_FAILED', detail: string): MeshError {
    const retryAfter = code === 'RELAY_UNAVAILABLE' ? { headers: { 'retry-after': String(BUSY_RETRY_S) } } : {};
    return new MeshError(code, { host: this.host, model: this.model, detail, retryAfter: BUSY_RETRY_S }, retryAfter);
  }

  #end(ending: RelayEnding, outcome: RelayOutcome): void {
    if (this.#ended) return;
    this.#finish(outcome, ending.error);
    this.#listener.ended(ending);
  }

  /**
   * Over: counted, and logged — a failure as a warning, a WebSocket (a client's session, long) as news, a request (a
   * client may make hundreds) only when asked for.
   */
  #finish(outcome: RelayOutcome, error?: MeshError): void {
    const { log, clock } = this.#deps;
    const level = outcome === 'failed' ? 'warn' : this.kind === 'ws' ? 'info' : 'debug';
    log[level]({ relay: this.id, host: this.host, model: this.model, kind: this.kind, outcome, ms: clock.now() - this.#openedAt, ...(error ? { code: error.code, reason: error.message } : {}) }, 'pass-through relay ended');
    this.#ended = true;
    this.#idle?.cancel();
    this.#window.close();
    this.#deps.metrics.ended(this.host, this.model, this.kind, outcome);
    this.#onEnd();
  }

  #moved(): void {
    this.#movedAt = this.#deps.clock.now();
  }

  /** Look again when the relay would have been still for `idleMs`; end it if nothing moved meanwhile. */
  #armIdle(delayMs: number): void {
    this.#idle = this.#deps.clock.setTimer(delayMs, () => {
      if (this.#ended) return;
      const still = this.#deps.clock.now() - this.#movedAt;
      if (still < this.#deps.idleMs) return this.#armIdle(this.#deps.idleMs - still);
      this.fail(this.#error('RELAY_FAILED', `nothing moved either way for ${this.#deps.idleMs} ms (agents.link.relays.idleMs)`));
    });
  }
}

/**
 * The pass-through's relays over every host's link: opened for a client (at most `max` per link at once), given what
 * each agent says about its own relays only, and failed all at once when a host's session ends. The client's side of
 * a relay is its listener (http-pipe.ts for a request, socket-pipe.ts for a WebSocket).
 */
export class Relays {
  readonly #deps: RelaysDeps;
  readonly #bySession = new Map<HostSession, Map<string, Relay>>();

  constructor(deps: RelaysDeps) {
    this.#deps = deps;
  }

  /** Open a relay to the target's ComfyUI; throws RELAY_UNAVAILABLE (503, Retry-After) when its link carries `max` already. */
  open(target: RelayTarget, request: RelayRequest, listener: RelayListener): Relay {
    const { session, manifest } = target;
    const open = this.#bySession.get(session) ?? new Map<string, Relay>();
    if (open.size >= this.#deps.max) {
      throw new MeshError('RELAY_UNAVAILABLE', {
        host: session.id, model: manifest.name, retryAfter: BUSY_RETRY_S,
        detail: `its link carries ${open.size} pass-through relays, its limit (agents.link.relays.max)`,
      }, { headers: { 'retry-after': String(BUSY_RETRY_S) } });
    }
    this.#bySession.set(session, open);
    const relay = new Relay(this.#deps, target, request.kind, listener, () => {
      open.delete(relay.id);
      if (open.size === 0 && this.#bySession.get(session) === open) this.#bySession.delete(session);
    });
    open.set(relay.id, relay);
    this.#deps.metrics.opened(session.id, request.kind);
    relay.open(request);
    return relay;
  }

  /** What an agent said about one of its relays; about one it does not have (ended meanwhile), nothing. */
  receive(session: HostSession, message: RelayReport): void {
    this.#bySession.get(session)?.get(message.relayId)?.receive(message);
  }

  /** A host's session ended (its link dropped, or it left): its relays fail. */
  lost(session: HostSession, reason: string): void {
    const open = this.#bySession.get(session);
    if (!open) return;
    this.#bySession.delete(session);
    this.#deps.log.warn({ host: session.id, relays: open.size, reason }, 'pass-through relays ended with their host\'s link');
    for (const relay of [...open.values()]) relay.lost(reason);
  }

  /** Relays open over a host's link. */
  openOn(session: HostSession): number {
    return this.#bySession.get(session)?.size ?? 0;
  }
}
