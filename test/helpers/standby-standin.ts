import { once } from 'node:events';
import { createServer, STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { MeshError } from '../../src/protocol/index.js';

/** What the stand-in saw: every request, upgrades included, as `METHOD path`. */
export interface StandbyStandin {
  url: string;
  requests: string[];
  /** The WebSocket upgrades among them (agents dialling the link). */
  upgrades(): number;
  /** When each upgrade arrived (performance.now()). */
  upgradeTimes: number[];
  close(): Promise<void>;
}

/**
 * A stand-in for a standby orchestrator: a plain node:http server, written for the tests, that answers every request
 * — the agent link's WebSocket upgrade too — 503 with the NOT_LEADER envelope and a Retry-After, as a standby of a
 * mesh whose orchestrators share one store does (docs/errors.md). It is not an orchestrator and runs nothing; it
 * counts what reached it, so a test can tell what was (and was not) sent its way. `code` answers another 503 code
 * instead (STORE_UNAVAILABLE: an active orchestrator whose database is away, which a client must not skip).
 */
export async function standbyStandin(options: { port?: number; code?: 'NOT_LEADER' | 'STORE_UNAVAILABLE' } = {}): Promise<StandbyStandin> {
  const code = options.code ?? 'NOT_LEADER';
  const error = code === 'NOT_LEADER'
    ? new MeshError('NOT_LEADER', { leader: 'unknown (a stand-in)', retryAfter: 5 })
    : new MeshError('STORE_UNAVAILABLE', { store: 'postgres (a stand-in)', detail: 'the database is away', retryAfter: 5 });
  const body = JSON.stringify({ error: error.toJSON() });
  const requests: string[] = [];
  const upgradeTimes: number[] = [];
  const seen = (request: IncomingMessage): void => {
    requests.push(`${request.method} ${request.url}`);
  };
  const server: Server = createServer((request, response) => {
    seen(request);
    request.resume();
    // connection: close, as a standby's answers say: a client keeps no connection to an orchestrator that turned it away.
    response.writeHead(503, { 'content-type': 'application/json; charset=utf-8', 'retry-after': '5', 'content-length': Buffer.byteLength(body), connection: 'close' });
    response.end(request.method === 'HEAD' ? undefined : body);
  });
  // An upgrade is answered as the link route's refusal is: an HTTP answer instead of 101, then the socket closed.
  server.on('upgrade', (request: IncomingMessage, socket: Socket) => {
    seen(request);
    upgradeTimes.push(performance.now());
    socket.end([
      `HTTP/1.1 503 ${STATUS_CODES[503]}`, 'content-type: application/json; charset=utf-8', 'retry-after: 5',
      `content-length: ${Buffer.byteLength(body)}`, 'connection: close', '', body,
    ].join('\r\n'));
  });
  server.listen(options.port ?? 0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    upgrades: () => upgradeTimes.length,
    upgradeTimes,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
