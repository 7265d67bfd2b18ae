import { ExponentialBackoff, type IBackoff } from 'cockatiel';
import type { Logger } from 'pino';
import WebSocket from 'ws';
import {
  LINK_CLOSE, LINK_PATH, OrchestratorMessage, type AgentMessage,
} from '../protocol/index.js';

type Hello = Extract<AgentMessage, { type: 'hello' }>;
type Welcome = Extract<OrchestratorMessage, { type: 'welcome' }>;

export interface AgentLinkOptions {
  /** The orchestrator's base URL (http or https). */
  url: string;
  grant: string;
  log: Logger;
  /** Built fresh for each connection, so it carries the work in flight right now. */
  hello(): Hello;
  onWelcome(welcome: Welcome): void;
  onMessage(message: OrchestratorMessage): void;
  /** The orchestrator refused this agent (bad grant, host or classes); reconnecting will not help. */
  onRejected(reason: string): void;
  onDisconnected?(): void;
}

/**
 * The agent's end of the link: dials out (so it works behind NAT), says
 * hello, and redials with exponential backoff and jitter whenever the
 * connection drops, until it is closed or refused.
 */
export class AgentLink {
  readonly #options: AgentLinkOptions;
  readonly #backoffFactory = new ExponentialBackoff({ initialDelay: 200, maxDelay: 5000 });
  #backoff: IBackoff<unknown> | null = null;
  #socket: WebSocket | null = null;
  #timer: NodeJS.Timeout | null = null;
  #closed = false;
  #connected = false;

  constructor(options: AgentLinkOptions) {
    this.#options = options;
  }

  get connected(): boolean {
    return this.#connected;
  }

  start(): void {
    this.#dial();
  }

  /** Send if connected; returns false when the message could not be sent. */
  send(message: AgentMessage): boolean {
    const socket = this.#socket;
    if (!this.#connected || !socket || socket.readyState !== WebSocket.OPEN) return false;
    socket.send(JSON.stringify(message));
    return true;
  }

  close(): void {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#socket?.close(1000, 'agent shutting down');
  }

  #dial(): void {
    if (this.#closed) return;
    const { log } = this.#options;
    const url = new URL(LINK_PATH, this.#options.url);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const socket = new WebSocket(url, { headers: { authorization: `Bearer ${this.#options.grant}` }, handshakeTimeout: 10_000 });
    this.#socket = socket;
    let refused: string | null = null;
    socket.on('open', () => {
      socket.send(JSON.stringify(this.#options.hello()));
    });
    socket.on('unexpected-response', (_request, response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => {
        const message = (() => {
          try { return (JSON.parse(body) as { error?: { message?: string } }).error?.message ?? body; } catch { return body; }
        })();
        if (response.statusCode === 401 || response.statusCode === 403) {
          refused = `HTTP ${response.statusCode}: ${message}`;
          this.#options.onRejected(refused);
          this.#closed = true;
        } else {
          log.warn({ status: response.statusCode, message }, 'orchestrator refused the link; will retry');
        }
        socket.terminate();
      });
    });
    socket.on('message', (data) => {
      let message: OrchestratorMessage;
      try {
        message = OrchestratorMessage.parse(JSON.parse(data.toString()));
      } catch (error) {
        log.warn({ err: error }, 'malformed message from the orchestrator');
        return;
      }
      if (message.type === 'welcome') {
        this.#connected = true;
        this.#backoff = null;
        log.info({ session: message.session, url: this.#options.url }, 'linked to the orchestrator');
        this.#options.onWelcome(message);
        return;
      }
      this.#options.onMessage(message);
    });
    socket.on('close', (code, reason) => {
      const wasConnected = this.#connected;
      this.#connected = false;
      this.#socket = null;
      if (code === LINK_CLOSE.rejected) {
        this.#closed = true;
        this.#options.onRejected(reason.toString() || 'rejected');
      }
      if (wasConnected) this.#options.onDisconnected?.();
      if (this.#closed) return;
      this.#backoff = (this.#backoff ?? this.#backoffFactory).next(undefined);
      const delay = this.#backoff.duration;
      log.info({ code, reason: reason.toString(), retryInMs: Math.round(delay) }, 'link down; redialling');
      this.#timer = setTimeout(() => this.#dial(), delay);
    });
    socket.on('error', (error) => {
      // A close event always follows; the redial happens there.
      if (!refused) log.debug({ err: error }, 'link error');
    });
  }
}
