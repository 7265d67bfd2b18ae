import { createServer, STATUS_CODES, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { MeshError } from '../../protocol/index.js';

/** The web pages (gallery, mesh view) and their files, which a standby sends on to the active orchestrator. */
const PAGES = /^\/(mesh)?$|^\/web\//;

/** Who runs the mesh now, as a standby tells a client it turns away. */
export interface ActiveOrchestrator {
  /** Its URL, if it said where it listens; null: unknown (or nobody holds the lease yet). */
  url: string | null;
}

/**
 * What a standby orchestrator answers while another runs the mesh: `/healthz` 200 (the process is up, and says it
 * stands by), the gallery and mesh view pages a 307 to the same page on the active orchestrator (once it is known),
 * `/readyz` and every other request 503 NOT_LEADER with Retry-After (the lease's length) naming the
 * active orchestrator, and the agent link's upgrade the same — so a client or an agent that knows several URLs goes
 * on to the next. The port is the one the orchestrator will serve on once it takes the lease over.
 */
export class StandbyServer {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();

  private constructor(server: Server) {
    this.#server = server;
    server.on('connection', (socket) => {
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
    });
  }

  static async listen(options: { host: string; port: number; retryAfterS: number; active(): ActiveOrchestrator }): Promise<StandbyServer> {
    const refusal = (): { status: number; body: string; headers: Record<string, string> } => {
      const error = new MeshError('NOT_LEADER', { leader: options.active().url ?? 'not known yet', retryAfter: options.retryAfterS });
      return { status: error.status, body: JSON.stringify({ error: error.toJSON() }), headers: { 'retry-after': String(options.retryAfterS) } };
    };
    const server = createServer((request, response) => {
      const path = (request.url ?? '/').split('?')[0]!;
      if (path === '/healthz') {
        response.writeHead(200, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify({ ok: true, role: 'standby', active: options.active().url }));
        return;
      }
      // A person's bookmark of the gallery or the mesh view on this machine: sent on to the same page where the mesh
      // runs now (the query with it, and the fragment, which the browser keeps), rather than an error page.
      const active = options.active().url;
      if (active && request.method === 'GET' && PAGES.test(path)) {
        response.writeHead(307, { location: new URL(request.url ?? '/', active).toString(), 'cache-control': 'no-store' }).end();
        return;
      }
      const { status, body, headers } = refusal();
      response.writeHead(status, { ...headers, 'content-type': 'application/json; charset=utf-8', connection: 'close' }).end(body);
    });
    // The agent link: its upgrade is refused the same way, before any WebSocket is made.
    server.on('upgrade', (_request, socket: Socket) => {
      const { status, body, headers } = refusal();
      socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nRetry-After: ${headers['retry-after']}\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => resolve());
    });
    return new StandbyServer(server);
  }

  get port(): number {
    const address = this.#server.address();
    return typeof address === 'object' && address ? address.port : 0;
  }

  /** Stop answering and free the port (the orchestrator takes it next). */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const socket of this.#sockets) socket.destroy();
    await closed;
  }
}
