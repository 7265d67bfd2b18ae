import net from 'node:net';

/**
 * An HTTP/1.1 client that costs about what Triton's perf_analyzer (C++, libcurl) costs a request: one keep-alive
 * connection, the request's bytes built once and written as they are, the answer framed by its Content-Length and
 * handed back as bytes. Node's `http` client parses and builds headers objects, streams and events for every request
 * (290–390 µs of CPU a request on the 2-core VM, about what the orchestrator spends answering one: bench/RESULTS.md),
 * and at concurrency 1 the client's turn is in every round trip — so a latency benchmark that wants the server's
 * figure measures with this one. One request at a time per client (no pipelining); a status other than the one
 * expected (200 unless `send` says), an answer without Content-Length or the connection closing mid-request rejects it.
 */
export class RawHttpClient {
  readonly #socket: net.Socket;
  readonly #connected: Promise<void>;
  #received: Buffer = Buffer.alloc(0);
  #pending: { status: string; resolve(body: Buffer): void; reject(error: Error): void } | null = null;

  constructor(url: string) {
    const { hostname, port } = new URL(url);
    this.#socket = net.connect(Number(port), hostname).setNoDelay(true);
    this.#connected = new Promise((resolve, reject) => {
      this.#socket.once('connect', () => resolve());
      this.#socket.once('error', reject);
    });
    this.#socket.on('data', (chunk: Buffer) => this.#read(chunk));
    this.#socket.on('close', () => this.#fail(new Error('the server closed the connection')));
    this.#socket.on('error', (error) => this.#fail(error));
  }

  /** The bytes of a request, built once: `body` with `headers` (Host and Content-Length are added). */
  static request(url: string, method: string, path: string, headers: Record<string, string>, body: string | Buffer = ''): Buffer {
    const { host } = new URL(url);
    const bytes = Buffer.from(body);
    const lines = Object.entries({ host, ...headers, 'content-length': String(bytes.length) }).map(([name, value]) => `${name}: ${value}\r\n`);
    return Buffer.concat([Buffer.from(`${method} ${path} HTTP/1.1\r\n${lines.join('')}\r\n`, 'latin1'), bytes]);
  }

  /** Send a request's bytes (`RawHttpClient.request`); resolves with the answer's body, if its status is `status`. */
  async send(request: Buffer, status = 200): Promise<Buffer> {
    await this.#connected;
    if (this.#pending) throw new Error('RawHttpClient sends one request at a time');
    return new Promise((resolve, reject) => {
      this.#pending = { status: `HTTP/1.1 ${status} `, resolve, reject };
      this.#socket.write(request);
    });
  }

  close(): void {
    this.#socket.destroy();
  }

  #read(chunk: Buffer): void {
    this.#received = this.#received.length > 0 ? Buffer.concat([this.#received, chunk]) : chunk;
    const headEnd = this.#received.indexOf('\r\n\r\n');
    if (headEnd < 0) return;
    const head = this.#received.subarray(0, headEnd).toString('latin1');
    const length = /\r\ncontent-length: *(\d+)/i.exec(head)?.[1];
    if (length === undefined) return this.#fail(new Error(`an answer without Content-Length: ${head.split('\r\n')[0]}`));
    const end = headEnd + 4 + Number(length);
    if (this.#received.length < end) return;
    const body = this.#received.subarray(headEnd + 4, end);
    this.#received = this.#received.subarray(end);
    const pending = this.#pending;
    this.#pending = null;
    if (pending && !head.startsWith(pending.status)) pending.reject(new Error(`${head.split('\r\n')[0]}: ${body.toString('utf8', 0, 200)}`));
    else pending?.resolve(body);
  }

  #fail(error: Error): void {
    const pending = this.#pending;
    this.#pending = null;
    pending?.reject(error);
  }
}
