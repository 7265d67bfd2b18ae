import type { AgentMessage, ErrorCode, OrchestratorMessage } from '../../protocol/index.js';
import { ReceiveWindow, SendWindow } from '../../net/relay-flow.js';
import { headersWithin } from '../../net/relay-headers.js';

export type RelayOpen = Extract<OrchestratorMessage, { type: 'relay-open' }>;
export type RelayDataMessage = Extract<OrchestratorMessage, { type: 'relay-data' }>;

/** The codes an agent ends a relay with when it fails (the orchestrator answers the client with them). */
export type RelayErrorCode = Extract<ErrorCode, 'PASSTHROUGH_NOT_FOUND' | 'RELAY_UNAVAILABLE' | 'RELAY_FAILED'>;

/**
 * The agent's end of one relay, what its HTTP and WebSocket kinds share: the two windows (what it may send the
 * orchestrator, what the orchestrator may send it), the messages it sends about the relay, and its one ending.
 */
export abstract class RelayEnd {
  readonly id: string;
  protected readonly chunkBytes: number;
  /** What this end may still send (ComfyUI's bytes, to the client). */
  protected readonly window: SendWindow;
  /** What the orchestrator sent and this end has not yet handed to ComfyUI. */
  readonly #received: ReceiveWindow;
  readonly #send: (message: AgentMessage) => void;
  /** Bytes sent so far: where the next piece starts. */
  #sent = 0;
  #ended = false;
  readonly #onEnd: (() => void)[] = [];

  constructor(open: RelayOpen, send: (message: AgentMessage) => void) {
    this.id = open.relayId;
    this.chunkBytes = open.chunkBytes;
    this.window = new SendWindow(open.windowBytes);
    this.#received = new ReceiveWindow(open.windowBytes);
    this.#send = send;
  }

  /** Reach ComfyUI at its base URL (`http://127.0.0.1:8188`, no trailing slash). */
  abstract start(baseUrl: string): void;

  /** Bytes from the client. */
  abstract data(message: RelayDataMessage): void;

  /** The orchestrator ended the relay (the client went, or closed its WebSocket with `code`). */
  abstract close(code?: number, reason?: string): void;

  get ended(): boolean {
    return this.#ended;
  }

  /** Called once, when the relay ends whichever way. */
  onEnd(listener: () => void): void {
    if (this.#ended) listener();
    else this.#onEnd.push(listener);
  }

  credit(bytes: number): void {
    this.window.credit(bytes);
  }

  /** The relay failed: the orchestrator is told why, and the relay ends. */
  fail(code: RelayErrorCode, message: string): void {
    if (this.#ended) return;
    this.#send({ type: 'relay-close', relayId: this.id, error: { code, message: message.slice(0, 4000) } });
    this.end();
  }

  /**
   * Count a piece the orchestrator sent; false (and the relay failed) when it came past the window, or after a piece
   * that never arrived: nothing more of the relay is taken.
   */
  protected received(bytes: number, at: number): boolean {
    const broken = this.#received.received(bytes, at);
    if (broken === null) return true;
    this.fail('RELAY_FAILED', `from the orchestrator: ${broken}`);
    return false;
  }

  /** `bytes` of the orchestrator's reached ComfyUI: credit them back. */
  protected handedOn(bytes: number): void {
    if (bytes === 0 || this.#ended) return;
    this.#received.handedOn(bytes);
    this.#send({ type: 'relay-credit', relayId: this.id, bytes });
  }

  /** The answer's head; its headers cut to what fits one piece (so the message fits the link's frame limit, as a piece does). */
  protected sendHead(status: number, headers: [string, string][]): void {
    if (!this.#ended) this.#send({ type: 'relay-head', relayId: this.id, status, headers: headersWithin(headers, this.chunkBytes) });
  }

  protected sendData(piece: Buffer, flags: { end?: boolean; binary?: boolean; fin?: boolean } = {}): void {
    if (this.#ended) return;
    this.#send({ type: 'relay-data', relayId: this.id, data: piece.toString('base64'), at: this.#sent, ...flags });
    this.#sent += piece.length;
  }

  /** ComfyUI ended its side: the orchestrator hears of it, with a WebSocket's close code and reason. */
  protected sendClose(code?: number, reason?: string): void {
    if (this.#ended) return;
    this.#send({ type: 'relay-close', relayId: this.id, ...(code !== undefined ? { code } : {}), ...(reason ? { reason } : {}) });
    this.end();
  }

  /** The relay is over: nothing more is sent about it, its windows stop, and what holds its model lets go. */
  protected end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.window.close();
    this.released();
    for (const listener of this.#onEnd.splice(0)) listener();
  }

  /** Let go of what the relay holds of ComfyUI (its request, its socket). */
  protected abstract released(): void;
}
