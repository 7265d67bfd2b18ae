import type { FastifyReply, FastifyRequest } from 'fastify';
import { corkForTick, uncorkNow } from '../../net/cork.js';
import { every, type Clock } from '../../protocol/clock.js';

const KEEPALIVE_MS = 15_000;

export interface SseStream {
  /**
   * Send one event; `id` (when given) is what the client sends back as Last-Event-ID; `json`, the data as JSON already
   * (an event the bus serialized once for every stream that sends it).
   */
  send(event: string, data: unknown, id?: string, json?: string): void;
  close(): void;
  readonly closed: boolean;
}

/**
 * Take over the response as a text/event-stream. A comment line every 15 s
 * keeps proxies from timing the stream out; `onClose` runs once, whoever closes.
 */
export function openSse(request: FastifyRequest, reply: FastifyReply, onClose: () => void, clock: Clock): SseStream {
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
  });
  let closed = false;
  // A HEAD answer is the headers alone: end it now (Node holds the headers of a HEAD answer back
  // until it ends), and write nothing after.
  if (request.method === 'HEAD') raw.end();
  else raw.write('retry: 2000\n\n');
  const stopKeepalive = every(clock, KEEPALIVE_MS, () => !raw.writableEnded && raw.write(': keepalive\n\n'));
  const finish = (): void => {
    if (closed) return;
    closed = true;
    stopKeepalive();
    onClose();
  };
  request.raw.on('close', finish);
  return {
    send(event, data, id, json) {
      if (closed || raw.writableEnded) return;
      corkForTick(raw);
      raw.write(`${id ? `id: ${id}\n` : ''}event: ${event}\ndata: ${json ?? JSON.stringify(data)}\n\n`);
    },
    close() {
      finish();
      // The events of this tick first: ending a corked response loses them on Node 22 (see uncorkNow).
      uncorkNow(raw);
      raw.end();
    },
    get closed() {
      return closed;
    },
  };
}
