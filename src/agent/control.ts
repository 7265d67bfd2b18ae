import { createHash } from 'node:crypto';
import { chmodSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { Logger } from 'pino';
import { systemClock } from '../protocol/clock.js';

const WINDOWS = process.platform === 'win32';

/**
 * Where the agent of a data folder listens for `gpumesh agent drain`: a Unix socket in the folder (`agent.sock`), or on
 * Windows a named pipe named after the folder (`\\.\pipe\gpumesh-agent-<its hash>`), since Windows has no sockets in
 * folders an agent could listen on. Both sides reach the same agent from the same --data.
 */
export function controlEndpoint(dataDir: string, platform = process.platform): string {
  if (platform !== 'win32') return join(dataDir, 'agent.sock');
  const folder = resolve(dataDir).toLowerCase();
  return `\\\\.\\pipe\\gpumesh-agent-${createHash('sha256').update(folder).digest('hex').slice(0, 16)}`;
}

/** What the agent tells `gpumesh agent drain` while it drains, one JSON object a line. */
export type DrainReport =
  | { state: 'draining'; batches: number; unacknowledged: number }
  | { state: 'left'; drained: boolean };

export interface ControlHandlers {
  /** Start draining (idempotent); `report` is called as the work left changes and once at the end. */
  drain(report: (line: DrainReport) => void): void;
}

/**
 * The agent's control socket: a Unix socket in its data folder (mode 0600, so
 * only the user the agent runs as can drain it), a named pipe on Windows (controlEndpoint). `gpumesh agent drain` writes
 * `{"command":"drain"}` and reads the agent's progress until it has left.
 * A local socket rather than an orchestrator route: the host's own user may
 * take it out without holding an admin grant.
 */
export class ControlServer {
  readonly #server: Server;
  readonly #path: string;
  readonly #clients = new Set<Socket>();

  private constructor(server: Server, path: string) {
    this.#server = server;
    this.#path = path;
  }

  static async listen(path: string, handlers: ControlHandlers, log: Logger): Promise<ControlServer> {
    // A socket file left by an agent that died is in the way; a live agent on the same folder would be a mistake anyway.
    if (!WINDOWS) rmSync(path, { force: true });
    let control!: ControlServer;
    const server = createServer((socket) => {
      control.#clients.add(socket);
      socket.on('close', () => control.#clients.delete(socket));
      socket.on('error', () => socket.destroy());
      let buffer = '';
      socket.on('data', (chunk: Buffer) => {
        buffer += chunk.toString();
        const end = buffer.indexOf('\n');
        if (end < 0) {
          if (buffer.length > 4096) socket.destroy();
          return;
        }
        const line = buffer.slice(0, end);
        buffer = '';
        let command: unknown;
        try {
          command = (JSON.parse(line) as { command?: unknown }).command;
        } catch {
          command = null;
        }
        if (command !== 'drain') {
          socket.end(`${JSON.stringify({ error: `unknown command ${JSON.stringify(line.slice(0, 100))}; the agent knows "drain"` })}\n`);
          return;
        }
        log.info('drain asked on the control socket');
        handlers.drain((report) => {
          if (!socket.writable) return;
          socket.write(`${JSON.stringify(report)}\n`);
          if (report.state === 'left') socket.end();
        });
      });
    });
    control = new ControlServer(server, path);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    // A socket file's mode keeps other users out; a Windows named pipe is not a file (its default security applies).
    if (!WINDOWS) chmodSync(path, 0o600);
    server.unref();
    return control;
  }

  /** Stop listening; waits (briefly) until the clients got their last lines. */
  async close(): Promise<void> {
    this.#server.close();
    if (!WINDOWS) rmSync(this.#path, { force: true });
    const pending = [...this.#clients].map((socket) => new Promise<void>((resolve) => {
      socket.once('close', () => resolve());
      socket.end();
    }));
    await Promise.race([Promise.all(pending), new Promise((resolve) => systemClock.setTimer(1000, () => resolve(undefined)))]);
  }
}

/** `gpumesh agent drain`: ask the agent listening on `path` to drain, passing each report on until it has left. */
export function requestDrain(path: string, onReport: (report: DrainReport) => void): Promise<DrainReport & { state: 'left' }> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    let buffer = '';
    let left: (DrainReport & { state: 'left' }) | null = null;
    socket.on('connect', () => socket.write(`${JSON.stringify({ command: 'drain' })}\n`));
    socket.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let end;
      while ((end = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        const parsed = JSON.parse(line) as DrainReport | { error: string };
        // `gpumesh agent drain` prints these as they are: the agent's own words, or that it went away.
        if ('error' in parsed) return reject(new Error(parsed.error));
        onReport(parsed);
        if (parsed.state === 'left') left = parsed;
      }
    });
    socket.on('error', reject);
    socket.on('close', () => {
      if (left) resolve(left);
      else reject(new Error('the agent closed its control socket before it had left'));
    });
  });
}
