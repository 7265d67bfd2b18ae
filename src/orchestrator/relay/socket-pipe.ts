import type { WebSocket } from 'ws';
import { MeshError, type RelayHeaders } from '../../protocol/index.js';
import { every, type Clock } from '../../protocol/clock.js';
import { closeReason, MessagePump, sendableCloseCode } from '../../net/relay-flow.js';
import { socketHeaders } from '../../net/relay-headers.js';
import type { Relay, RelayEnding, RelayFlags, RelayListener, Relays, RelayTarget } from './relays.js';

type IncomingHeaders = Readonly<Record<string, string | string[] | undefined>>;

/** How a client's socket is watched: pinged every half `idleMs`, taken for gone when a ping goes unanswered. */
export interface SocketLiveness {
  clock: Clock;
  idleMs: number;
}

/** RFC 6455's "internal error": what a client's socket is closed with when its relay failed (the host's link dropped). */
const RELAY_FAILED_CLOSE = 1011;

/**
 * A client's WebSocket relayed to the target's ComfyUI (`/ws?clientId=…`). `start` asks the agent for ComfyUI's socket,
 * and `opened` resolves once it is open — before the client's upgrade is answered, so a host that cannot serve it is an HTTP
 * error the client can read (404, 502, 503), not a socket that opens and dies. `attach` then joins the client's
 * socket: ComfyUI's messages (JSON text, binary previews) reach it byte for byte and in order, its own reach ComfyUI,
 * both ways as the relay's window allows. Either side's close ends the relay; a relay that fails closes the client's
 * socket with 1011. A client that answers no ping for `idleMs` is taken for gone.
 */
export class SocketPipe implements RelayListener {
  readonly #relay: Relay;
  readonly #liveness: SocketLiveness;
  #socket: WebSocket | null = null;
  /** ComfyUI's pieces that came before the client's socket was attached. */
  #early: { piece: Buffer; flags: RelayFlags; handedOn: () => void }[] = [];
  /** How the relay ended before the client's socket was attached. */
  #endedEarly: RelayEnding | null = null;
  #opened!: (error: MeshError | null) => void;
  readonly #open: Promise<void>;
  #stopPinging: (() => void) | null = null;

  private constructor(relays: Relays, target: RelayTarget, path: string, headers: IncomingHeaders, liveness: SocketLiveness) {
    this.#liveness = liveness;
    this.#open = new Promise((resolve, reject) => {
      this.#opened = (error) => (error ? reject(error) : resolve());
    });
    this.#relay = relays.open(target, { kind: 'ws', path, headers: socketHeaders(headers) }, this);
  }

  /** Ask for ComfyUI's socket: `opened` resolves once it is open, or rejects with why it could not be (a MeshError). */
  static start(relays: Relays, target: RelayTarget, path: string, headers: IncomingHeaders, liveness: SocketLiveness): SocketPipe {
    return new SocketPipe(relays, target, path, headers, liveness);
  }

  get opened(): Promise<void> {
    return this.#open;
  }

  /** The client's upgrade was answered: join its socket to the relay. */
  attach(socket: WebSocket): void {
    this.#socket = socket;
    const relay = this.#relay;
    const pump = new MessagePump({
      window: relay.window, chunkBytes: relay.chunkBytes, socket,
      send: (piece, flags) => relay.sendPiece(piece, flags),
      closed: (code, reason) => relay.close('client-gone', code, reason),
    });
    let alive = true;
    socket.on('message', (data: Buffer | ArrayBuffer | Buffer[], binary) => {
      alive = true;
      pump.message(data, binary);
    });
    socket.on('pong', () => (alive = true));
    socket.on('close', (code, reason) => {
      this.#stopPinging?.();
      pump.close(code, reason.toString());
    });
    // A client gone without a word (a laptop closed, a dropped line) would hold the relay and its model forever.
    this.#stopPinging = every(this.#liveness.clock, Math.max(500, this.#liveness.idleMs / 2), () => {
      if (!alive) return socket.terminate();
      alive = false;
      socket.ping();
    });
    for (const { piece, flags, handedOn } of this.#early.splice(0)) this.#toClient(piece, flags, handedOn);
    if (this.#endedEarly) this.#closeClient(this.#endedEarly);
  }

  /** The client's upgrade will not happen (it went before the answer): the relay ends, and nothing waits for it to open. */
  abandon(): void {
    this.#relay.close('client-gone', 1001, 'the client went before its upgrade');
    this.#opened(new MeshError('RELAY_FAILED', { host: this.#relay.host, model: this.#relay.model, detail: 'the client went before its WebSocket opened' }));
  }

  head(status: number, _headers: RelayHeaders): void {
    if (status === 101) this.#opened(null);
    else this.#opened(new MeshError('RELAY_FAILED', { host: this.#relay.host, model: this.#relay.model, detail: `ComfyUI answered the WebSocket with ${status}` }));
  }

  data(piece: Buffer, flags: RelayFlags, handedOn: () => void): void {
    if (this.#socket) this.#toClient(piece, flags, handedOn);
    else this.#early.push({ piece, flags, handedOn });
  }

  ended(ending: RelayEnding): void {
    this.#opened(ending.error ?? new MeshError('RELAY_FAILED', { host: this.#relay.host, model: this.#relay.model, detail: 'ComfyUI closed the WebSocket before it opened' }));
    if (this.#socket) this.#closeClient(ending);
    else this.#endedEarly = ending;
  }

  #toClient(piece: Buffer, flags: RelayFlags, handedOn: () => void): void {
    const socket = this.#socket!;
    if (socket.readyState !== socket.OPEN) return;
    socket.send(piece, { binary: flags.binary === true, fin: flags.fin !== false }, () => handedOn());
  }

  #closeClient(ending: RelayEnding): void {
    const socket = this.#socket!;
    this.#stopPinging?.();
    if (socket.readyState !== socket.OPEN) return;
    if (ending.error) socket.close(RELAY_FAILED_CLOSE, closeReason(ending.error.message));
    else socket.close(sendableCloseCode(ending.code), closeReason(ending.reason ?? ''));
  }
}
