import type { FastifyReply, FastifyRequest } from 'fastify';
import { MeshError, type RelayHeaders } from '../../protocol/index.js';
import { RelayClosed, sendStream } from '../../net/relay-flow.js';
import { headerRecord, onlyHeaders, requestHeaders } from '../../net/relay-headers.js';
import type { Relay, RelayEnding, RelayFlags, RelayListener, Relays, RelayTarget } from './relays.js';

/**
 * Headers every relayed answer carries: what ComfyUI serves (a page of its web UI, a file of its folders a client
 * uploaded) never runs as a page of the orchestrator's origin — opened in a browser it is sandboxed, as a blob is
 * (http/blobs.ts), so it cannot read the gallery's grant.
 */
export const RELAYED_ANSWER_HEADERS = { 'content-security-policy': "default-src 'none'; sandbox", 'x-content-type-options': 'nosniff' } as const;

/** Whether a request has a body to relay (a length above 0, or chunks). */
function hasBody(request: FastifyRequest): boolean {
  const { headers } = request.raw;
  return headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
}

/**
 * Relay one client request to the target's ComfyUI and answer with what it answers. The request's body streams to the
 * agent as the relay's window allows (so an upload of any size holds one window here), the answer's body back to the
 * client as it takes it (each piece credited once written to its socket). A relay that fails before ComfyUI's answer
 * throws (the client gets the error's status: 404, 502, 503); after it, the answer is cut short.
 */
export async function relayHttp(relays: Relays, target: RelayTarget, path: string, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  const pipe = new HttpPipe(reply);
  const relay = relays.open(target, { kind: 'http', method: request.method, path, headers: requestHeaders(request.raw.headers), body: hasBody(request) }, pipe);
  pipe.relay = relay;
  // The client hung up: ComfyUI's request is cut off, and nothing waits for its answer any more.
  reply.raw.on('close', () => {
    relay.close('client-gone');
    pipe.gone();
  });
  if (hasBody(request)) void sendBody(request, relay);
  await pipe.answered;
}

/** The client's body to the agent, piece by piece as the window allows, then its end. */
async function sendBody(request: FastifyRequest, relay: Relay): Promise<void> {
  try {
    await sendStream(request.raw, relay.window, relay.chunkBytes, (piece) => relay.sendPiece(piece));
    relay.sendPiece(Buffer.alloc(0), { end: true });
  } catch (error) {
    if (error instanceof RelayClosed) return; // the relay ended first (ComfyUI answered, or failed)
    relay.close('client-gone'); // the client's upload broke off
  }
}

/** The client's side of an HTTP relay: ComfyUI's answer written to the client's reply, as it comes. */
class HttpPipe implements RelayListener {
  relay: Relay | null = null;
  readonly answered: Promise<void>;
  readonly #reply: FastifyReply;
  #headed = false;
  #settle!: (error: MeshError | null) => void;

  constructor(reply: FastifyReply) {
    this.#reply = reply;
    this.answered = new Promise((resolve, reject) => {
      this.#settle = (error) => (error ? reject(error) : resolve());
    });
  }

  head(status: number, headers: RelayHeaders): void {
    this.#headed = true;
    this.#reply.hijack();
    this.#reply.raw.writeHead(status, { ...headerRecord(onlyHeaders(headers, 'answer')), ...RELAYED_ANSWER_HEADERS });
    this.#settle(null);
  }

  data(piece: Buffer, flags: RelayFlags, handedOn: () => void): void {
    const response = this.#reply.raw;
    if (!this.#headed || response.destroyed) return;
    if (piece.length > 0) response.write(piece, () => handedOn());
    if (flags.end) {
      response.end();
      this.relay?.close('answered');
    }
  }

  /** The client went before ComfyUI answered. */
  gone(): void {
    if (!this.#headed) this.#settle(this.#failure('the client went before ComfyUI answered'));
  }

  ended(ending: RelayEnding): void {
    if (!this.#headed) {
      this.#settle(ending.error ?? this.#failure('ComfyUI ended the exchange before it answered'));
      return;
    }
    // The answer had begun: cut it short, so the client sees it incomplete rather than whole.
    if (!this.#reply.raw.writableEnded) this.#reply.raw.destroy();
  }

  #failure(detail: string): MeshError {
    return new MeshError('RELAY_FAILED', { host: this.relay?.host ?? '?', model: this.relay?.model ?? '?', detail });
  }
}
