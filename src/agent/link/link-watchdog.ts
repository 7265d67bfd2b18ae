import { every, systemClock, type Clock } from '../../protocol/clock.js';

/** What the watchdog needs of a WebSocket: ws's own WebSocket has both. */
export interface WatchedSocket {
  ping(): void;
  terminate(): void;
}

export interface LinkWatchdogOptions {
  /** How often to ping (the link's heartbeat interval). */
  intervalMs: number;
  /** Heard nothing for longer than this: the link is dead (the orchestrator's agents.staleAfterMs). */
  silentAfterMs: number;
  /** The link went silent; the socket has been terminated (its close event follows, and the link redials). */
  onSilent(silentMs: number): void;
}

/**
 * The agent's side of liveness. A link whose packets are silently dropped — a
 * cable pulled, Wi-Fi gone, a NAT that forgot the connection — never closes by
 * itself: the agent's writes go into the kernel's buffer and TCP retransmits
 * them for many minutes. So the agent pings the orchestrator every interval
 * (the server answers pings by itself) and counts anything it hears, a pong or
 * a message, as life; silence longer than `silentAfterMs` terminates the
 * socket, which closes it at once and makes the link redial.
 */
export class LinkWatchdog {
  readonly #socket: WatchedSocket;
  readonly #options: LinkWatchdogOptions;
  readonly #clock: Clock;
  #lastHeard: number;
  #stop: (() => void) | null;

  constructor(socket: WatchedSocket, options: LinkWatchdogOptions, clock: Clock = systemClock) {
    this.#socket = socket;
    this.#options = options;
    this.#clock = clock;
    this.#lastHeard = clock.now();
    this.#stop = every(clock, options.intervalMs, () => this.#tick());
  }

  /** Something arrived from the orchestrator (a message or a pong). */
  heard(): void {
    this.#lastHeard = this.#clock.now();
  }

  stop(): void {
    this.#stop?.();
    this.#stop = null;
  }

  #tick(): void {
    const silent = this.#clock.now() - this.#lastHeard;
    if (silent <= this.#options.silentAfterMs) {
      this.#socket.ping();
      return;
    }
    this.stop();
    this.#socket.terminate();
    this.#options.onSilent(silent);
  }
}
