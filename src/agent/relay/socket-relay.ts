import WebSocket from 'ws';
import type { AgentMessage, RelayRequest } from '../../protocol/index.js';
import { closeReason, MessagePump, sendableCloseCode } from '../../net/relay-flow.js';
import { headerRecord, onlyHeaders } from '../../net/relay-headers.js';
import { RelayEnd, type RelayDataMessage, type RelayOpen } from './relay-end.js';

/** The largest message ComfyUI may send one client (a preview, a big `executed`): ws's default, its whole frame held once. */
const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** How long ComfyUI has to answer the WebSocket handshake. */
const HANDSHAKE_MS = 10_000;

/**
 * A client's WebSocket to ComfyUI (`/ws?clientId=…`): ComfyUI's messages go to the orchestrator in order, each in
 * pieces as the window allows (MessagePump: while a piece waits, nothing more is read from ComfyUI's socket), and the
 * client's messages go to ComfyUI as they come, each piece credited once written. Either side's close ends it.
 */
export class SocketRelay extends RelayEnd {
  readonly #request: Extract<RelayRequest, { kind: 'ws' }>;
  #socket: WebSocket | null = null;
  #opened = false;
  /** The client's pieces that came before ComfyUI's socket opened. */
  #early: RelayDataMessage[] = [];

  constructor(open: RelayOpen & { request: { kind: 'ws' } }, send: (message: AgentMessage) => void) {
    super(open, send);
    this.#request = open.request;
  }

  start(baseUrl: string): void {
    if (this.ended) return;
    const url = `${baseUrl.replace(/^http/, 'ws')}${this.#request.path}`;
    const { 'sec-websocket-protocol': offered, ...headers } = headerRecord(onlyHeaders(this.#request.headers, 'socket'));
    const protocols = (Array.isArray(offered) ? offered.join(',') : offered ?? '').split(',').map((name) => name.trim()).filter(Boolean);
    const socket = new WebSocket(url, protocols, { headers: headers as Record<string, string>, perMessageDeflate: false, maxPayload: MAX_MESSAGE_BYTES, handshakeTimeout: HANDSHAKE_MS });
    this.#socket = socket;
    socket.on('open', () => {
      this.#opened = true;
      this.sendHead(101, socket.protocol ? [['sec-websocket-protocol', socket.protocol]] : []);
      for (const message of this.#early.splice(0)) this.#toComfy(message);
    });
    socket.on('unexpected-response', (request, response) => {
      this.fail('RELAY_FAILED', `ComfyUI answered the WebSocket handshake at ${this.#request.path.split('?')[0]} with ${response.statusCode} instead of switching protocols`);
      request.destroy();
    });
    socket.on('error', (error) => {
      if (!this.#opened) this.fail('RELAY_FAILED', `ComfyUI's WebSocket at ${baseUrl} could not be opened: ${error.message}`);
      // Once open, a close event follows any error: the relay ends there.
    });
    // ComfyUI's messages go on in order as the window allows; its close after the last of them.
    const pump = new MessagePump({
      window: this.window, chunkBytes: this.chunkBytes, socket,
      send: (piece, flags) => this.sendData(piece, flags),
      closed: (code, reason) => this.sendClose(code, closeReason(reason)),
    });
    socket.on('message', (data: Buffer | ArrayBuffer | Buffer[], binary) => pump.message(data, binary));
    socket.on('close', (code, reason) => pump.close(code, reason.toString()));
  }

  data(message: RelayDataMessage): void {
    if (this.ended) return;
    if (!this.received(Buffer.byteLength(message.data, 'base64'), message.at)) return;
    if (this.#opened) this.#toComfy(message);
    else this.#early.push(message);
  }

  close(code?: number, reason?: string): void {
    const socket = this.#socket;
    if (socket && this.#opened) socket.close(sendableCloseCode(code), closeReason(reason ?? ''));
    this.end();
  }

  #toComfy(message: RelayDataMessage): void {
    const piece = Buffer.from(message.data, 'base64');
    this.#socket!.send(piece, { binary: message.binary === true, fin: message.fin !== false }, () => this.handedOn(piece.length));
  }

  protected released(): void {
    this.#early = [];
    const socket = this.#socket;
    if (!socket) return;
    if (socket.readyState === WebSocket.CONNECTING) socket.terminate();
    else if (socket.readyState === WebSocket.OPEN) socket.close(1001, 'the client went');
  }
}
