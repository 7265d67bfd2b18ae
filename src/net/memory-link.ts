import { EventEmitter } from 'node:events';

const OPEN = 1;
const CLOSED = 3;
/** WebSocket's ready states (CONNECTING, OPEN, CLOSING, CLOSED); an in-memory end is only ever open or closed. */
type ReadyState = 0 | 1 | 2 | 3;

/**
 * One end of a link between two parts of one process: the orchestrator and
 * the agent `gpumesh up` runs beside it. It has what the link code uses of a
 * WebSocket (send, close, terminate, ping; message, close and pong events), but
 * messages are handed over in memory instead of through a loopback socket and
 * a second process — which on a small machine was the most expensive hop of a
 * job. Each message is still the JSON text the wire carries, parsed and
 * validated by the receiver as from a socket, so the two parts share no
 * objects; and it arrives in a later microtask, never inside the sender's call.
 */
export class MemorySocket extends EventEmitter {
  readonly OPEN = OPEN;
  readyState: ReadyState = OPEN;
  #peer: MemorySocket | null = null;

  /** A connected pair: what one sends, the other receives. */
  static pair(): [MemorySocket, MemorySocket] {
    const a = new MemorySocket();
    const b = new MemorySocket();
    a.#peer = b;
    b.#peer = a;
    return [a, b];
  }

  send(data: string): void {
    const peer = this.#peer;
    if (this.readyState !== OPEN || !peer) return;
    queueMicrotask(() => {
      if (peer.readyState === OPEN) peer.emit('message', data, false);
    });
  }

  /** Answered at once: the other end is this process. */
  ping(): void {
    queueMicrotask(() => {
      if (this.readyState === OPEN) this.emit('pong');
    });
  }

  /**
   * Both ends close with this code and reason, as a WebSocket's close handshake gives both the same. This end sends
   * nothing more at once; the other end closes after the messages already on their way to it, as a close frame
   * follows the frames sent before it.
   */
  close(code = 1005, reason = ''): void {
    if (this.readyState === CLOSED) return;
    this.#end(code, reason);
    const peer = this.#peer;
    if (peer) queueMicrotask(() => peer.#end(code, reason));
  }

  /** An end without a close frame: 1006 on both sides, as for a dropped connection. */
  terminate(): void {
    this.close(1006);
  }

  #end(code: number, reason: string): void {
    if (this.readyState === CLOSED) return;
    this.readyState = CLOSED;
    queueMicrotask(() => this.emit('close', code, Buffer.from(reason)));
  }
}
