/**
 * Flow control of a pass-through relay (protocol/link.ts, "Pass-through relays"), the same on both ends of the link:
 * a side sends at most the relay's window of bytes that the other has not credited back, and the receiver credits
 * bytes once it has handed them on. A reader that does not read (a client on a slow line, a ComfyUI busy with an
 * upload) stops the credits, the sender stops taking bytes from its source, and TCP's own backpressure reaches the
 * far end: each relay holds at most its window in each direction, whatever the body's size.
 */

/** Ends the waits of a window that will never open again (the relay is over). */
export class RelayClosed extends Error {
  override readonly name = 'RelayClosed';
}

/** What a sender may still send. */
export class SendWindow {
  #credit: number;
  readonly #waiting: { bytes: number; resolve: () => void; reject: (error: Error) => void }[] = [];
  #closed: Error | null = null;

  constructor(windowBytes: number) {
    this.#credit = windowBytes;
  }

  /** Resolves once `bytes` (at most the window) may be sent, and takes them; rejects once the window is closed. Waits are served in order. */
  take(bytes: number): Promise<void> {
    if (this.#closed) return Promise.reject(this.#closed);
    if (this.#waiting.length === 0 && this.#credit >= bytes) {
      this.#credit -= bytes;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => this.#waiting.push({ bytes, resolve, reject }));
  }

  /** Whether a send of `bytes` would go at once. */
  fits(bytes: number): boolean {
    return !this.#closed && this.#waiting.length === 0 && this.#credit >= bytes;
  }

  credit(bytes: number): void {
    this.#credit += bytes;
    while (this.#waiting.length > 0 && this.#credit >= this.#waiting[0]!.bytes) {
      const next = this.#waiting.shift()!;
      this.#credit -= next.bytes;
      next.resolve();
    }
  }

  close(reason = new RelayClosed('the relay is closed')): void {
    if (this.#closed) return;
    this.#closed = reason;
    for (const waiter of this.#waiting.splice(0)) waiter.reject(reason);
  }
}

/**
 * What a receiver has been sent and not yet credited, and where the next piece must start: a sender past the window
 * is not keeping to the protocol, and a piece that does not start where the last ended means one was lost.
 */
export class ReceiveWindow {
  readonly #windowBytes: number;
  #outstanding = 0;
  #total = 0;

  constructor(windowBytes: number) {
    this.#windowBytes = windowBytes;
  }

  /** Count a piece of `bytes` that starts at `at`; why it breaks the protocol, or null when it is in order and in the window. */
  received(bytes: number, at: number): string | null {
    if (at !== this.#total) return `a piece was lost on the link (the next one started at byte ${at}, not ${this.#total})`;
    this.#total += bytes;
    this.#outstanding += bytes;
    return this.#outstanding <= this.#windowBytes ? null : `more than the relay's window (${this.#windowBytes} bytes) came ahead of credit`;
  }

  /** `bytes` were handed on: they are to be credited back. */
  handedOn(bytes: number): void {
    this.#outstanding = Math.max(0, this.#outstanding - bytes);
  }
}

/** A buffer in pieces of at most `chunkBytes` (one empty piece for an empty buffer). */
export function piecesOf(bytes: Uint8Array, chunkBytes: number): Buffer[] {
  if (bytes.length === 0) return [Buffer.alloc(0)];
  const pieces: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += chunkBytes) pieces.push(Buffer.from(bytes.buffer, bytes.byteOffset + at, Math.min(chunkBytes, bytes.length - at)));
  return pieces;
}

/**
 * Send what `source` yields in pieces of at most `chunkBytes`, each once the window has room for it. Nothing more is
 * read from the source while a piece waits, so a stream's own backpressure holds the rest where it came from.
 */
export async function sendStream(source: AsyncIterable<Uint8Array>, window: SendWindow, chunkBytes: number, send: (piece: Buffer) => void): Promise<void> {
  for await (const chunk of source) {
    if (chunk.length === 0) continue;
    for (const piece of piecesOf(chunk, chunkBytes)) {
      await window.take(piece.length);
      send(piece);
    }
  }
}

/** Close codes an endpoint may send (RFC 6455 §7.4): others (1005, 1006, 1015 — only ever observed) become 1000. */
export function sendableCloseCode(code: number | undefined): number {
  if (code === undefined) return 1000;
  if (code >= 3000 && code <= 4999) return code;
  return [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014].includes(code) ? code : 1000;
}

/** A close reason within the 123 bytes a close frame has room for. */
export function closeReason(reason: string): string {
  let text = reason;
  while (Buffer.byteLength(text) > 123) text = text.slice(0, -1);
  return text;
}

/** What a MessagePump needs of the socket it reads from: ws's pause and resume. */
export interface PausableSocket {
  pause(): void;
  resume(): void;
  readonly isPaused: boolean;
}

type Queued = { data: Buffer; binary: boolean } | { close: number; reason: string };

/**
 * A WebSocket's messages sent on over a relay, in order, each in pieces of at most `chunkBytes` (`fin` false on all
 * but its last), each once the window has room; while a piece waits, the socket is paused, so its messages stay in
 * the kernel's buffers instead of piling up here. Its close goes after its last message. The orchestrator uses it
 * for a client's socket, the agent for ComfyUI's.
 */
export class MessagePump {
  readonly #window: SendWindow;
  readonly #chunkBytes: number;
  readonly #socket: PausableSocket;
  readonly #send: (piece: Buffer, flags: { binary: boolean; fin: boolean }) => void;
  readonly #closed: (code: number, reason: string) => void;
  readonly #queue: Queued[] = [];
  #pumping = false;

  constructor(options: {
    window: SendWindow; chunkBytes: number; socket: PausableSocket;
    send: (piece: Buffer, flags: { binary: boolean; fin: boolean }) => void;
    closed: (code: number, reason: string) => void;
  }) {
    this.#window = options.window;
    this.#chunkBytes = options.chunkBytes;
    this.#socket = options.socket;
    this.#send = options.send;
    this.#closed = options.closed;
  }

  /** A message the socket received (ws's `message` event). */
  message(data: Buffer | ArrayBuffer | Buffer[], binary: boolean): void {
    const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    this.#push({ data: bytes, binary });
  }

  /** The socket closed (ws's `close` event). */
  close(code: number, reason: string): void {
    this.#push({ close: code, reason });
  }

  #push(item: Queued): void {
    this.#queue.push(item);
    if (!this.#pumping) void this.#pump();
  }

  async #pump(): Promise<void> {
    this.#pumping = true;
    try {
      while (this.#queue.length > 0) {
        const item = this.#queue.shift()!;
        if ('close' in item) return this.#closed(item.close, item.reason);
        const pieces = piecesOf(item.data, this.#chunkBytes);
        for (const [index, piece] of pieces.entries()) {
          if (!this.#window.fits(piece.length)) this.#socket.pause();
          await this.#window.take(piece.length);
          this.#send(piece, { binary: item.binary, fin: index === pieces.length - 1 });
        }
      }
    } catch (error) {
      // The relay closed while a piece waited: nothing more goes anywhere.
      if (!(error instanceof RelayClosed)) throw error;
      this.#queue.length = 0;
    } finally {
      this.#pumping = false;
      if (this.#socket.isPaused) this.#socket.resume();
    }
  }
}
