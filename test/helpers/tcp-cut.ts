import { createServer, connect, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on loopback in front of a server, that a test can cut as a network outage would: `cut()` resets every
 * connection and refuses new ones until `restore()`; `cutAfter(bytes)` cuts once that many more bytes went from
 * clients to the server (an upload broken off midway).
 */
export class TcpCut {
  readonly #target: number;
  readonly #sockets = new Set<Socket>();
  #server: Server | null = null;
  #port = 0;
  #cutAfter: number | null = null;
  #cutHandlers: (() => void)[] = [];

  private constructor(target: number) {
    this.#target = target;
  }

  static async start(targetPort: number): Promise<TcpCut> {
    const proxy = new TcpCut(targetPort);
    await proxy.#listen(0);
    return proxy;
  }

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** Cut once `bytes` more bytes have gone upstream; resolves when it happened. */
  cutAfter(bytes: number): Promise<void> {
    this.#cutAfter = bytes;
    return new Promise((resolve) => this.#cutHandlers.push(resolve));
  }

  async cut(): Promise<void> {
    this.#cutAfter = null;
    const server = this.#server;
    this.#server = null;
    for (const socket of this.#sockets) socket.resetAndDestroy();
    this.#sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    for (const handler of this.#cutHandlers.splice(0)) handler();
  }

  async restore(): Promise<void> {
    if (!this.#server) await this.#listen(this.#port);
  }

  async stop(): Promise<void> {
    await this.cut();
  }

  async #listen(port: number): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.#target, '127.0.0.1');
      this.#sockets.add(client);
      this.#sockets.add(upstream);
      const drop = (): void => {
        this.#sockets.delete(client);
        this.#sockets.delete(upstream);
        client.destroy();
        upstream.destroy();
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      client.on('data', (chunk: Buffer) => {
        if (this.#cutAfter !== null) {
          this.#cutAfter -= chunk.length;
          if (this.#cutAfter <= 0) {
            void this.cut();
            return;
          }
        }
        upstream.write(chunk);
      });
      upstream.pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    this.#server = server;
    this.#port = (server.address() as { port: number }).port;
  }
}
