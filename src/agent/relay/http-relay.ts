import http, { type ClientRequest, type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { AgentMessage, RelayRequest } from '../../protocol/index.js';
import { answerHeaders, headerRecord, onlyHeaders } from '../../net/relay-headers.js';
import { RelayClosed, sendStream } from '../../net/relay-flow.js';
import { RelayEnd, type RelayDataMessage, type RelayOpen } from './relay-end.js';

/**
 * One HTTP request to ComfyUI for a client: the request's body arrives from the orchestrator in pieces and is written
 * to ComfyUI as it comes (each piece credited once written), the answer's head goes back, then its body in pieces as
 * the window allows — the answer is read from ComfyUI only as fast as the client takes it.
 */
export class HttpRelay extends RelayEnd {
  readonly #request: Extract<RelayRequest, { kind: 'http' }>;
  #outgoing: ClientRequest | null = null;
  #answer: IncomingMessage | null = null;
  /** Pieces of the body that came before the request to ComfyUI was made. */
  #early: { piece: Buffer; end: boolean }[] = [];
  #headed = false;
  /** The answer was read to its end: its connection may serve another request. */
  #complete = false;

  constructor(open: RelayOpen & { request: { kind: 'http' } }, send: (message: AgentMessage) => void) {
    super(open, send);
    this.#request = open.request;
  }

  start(baseUrl: string): void {
    if (this.ended) return;
    const url = new URL(`${baseUrl}${this.#request.path}`);
    const transport = url.protocol === 'https:' ? https : http;
    const outgoing = transport.request(url, { method: this.#request.method, headers: headerRecord(onlyHeaders(this.#request.headers, 'request')) });
    this.#outgoing = outgoing;
    outgoing.on('response', (answer) => this.#answered(answer));
    outgoing.on('error', (error) => {
      if (!this.#headed) this.fail('RELAY_FAILED', `ComfyUI at ${baseUrl} could not be reached: ${error.message}`);
      else this.sendClose(undefined, 'ComfyUI dropped the connection');
    });
    if (!this.#request.body) outgoing.end();
    for (const { piece, end } of this.#early.splice(0)) this.#write(piece, end);
  }

  data(message: RelayDataMessage): void {
    if (this.ended) return;
    const piece = Buffer.from(message.data, 'base64');
    if (!this.received(piece.length, message.at)) return;
    if (this.#outgoing) this.#write(piece, message.end === true);
    else this.#early.push({ piece, end: message.end === true });
  }

  close(): void {
    // The client went: ComfyUI's request is cut off, as a proxy cuts off the upstream of a client that hung up.
    this.end();
  }

  #write(piece: Buffer, end: boolean): void {
    const outgoing = this.#outgoing!;
    if (piece.length > 0) outgoing.write(piece, () => this.handedOn(piece.length));
    if (end) outgoing.end();
  }

  async #answered(answer: IncomingMessage): Promise<void> {
    this.#answer = answer;
    if (this.ended) return void answer.destroy();
    this.#headed = true;
    this.sendHead(answer.statusCode ?? 502, answerHeaders(answer.headers));
    try {
      await sendStream(answer, this.window, this.chunkBytes, (piece) => this.sendData(piece));
    } catch (error) {
      if (error instanceof RelayClosed) return; // ended meanwhile
      return this.sendClose(undefined, 'ComfyUI dropped the connection mid-answer');
    }
    this.#complete = true;
    this.sendData(Buffer.alloc(0), { end: true });
    this.end();
  }

  protected released(): void {
    this.#early = [];
    if (this.#complete) return;
    this.#answer?.destroy();
    this.#outgoing?.destroy();
  }
}
