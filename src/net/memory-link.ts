import { EventEmitter } from 'node:events';
import { jsonCopy } from './json-copy.js';

const OPEN = 1;
const CLOSED = 3;
/** WebSocket's ready states (CONNECTING, OPEN, CLOSING, CLOSED); an in-memory end is only ever open or closed. */
type ReadyState = 0 | 1 | 2 | 3;

/**
 * What both ends of the agent link use of a socket — ws's WebSocket, or one end of an in-process link (MemorySocket) —
 * besides the events each end listens for (agent/link/link.ts's AgentSocket, orchestrator/link/agent-hub.ts's LinkSocket).
 */
export interface LinkEnd {
  readonly readyState: number;
  readonly OPEN: number;
  send(data: string): void;
  /** In-process ends send messages as values. */
  sendMessage?(message: object): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
}

/**
 * One end of a link between two parts of one process: the orchestrator and
 * the agent `gpumesh up` runs beside it. It has what the link code uses of a
 * WebSocket (send, close, terminate, ping; message, close and pong events), but
 * messages are handed over in memory instead of through a loopback socket and
 * a second process — which on a small machine was the most expensive hop of a
 * job. A message is sent as a copy taken at the moment it is sent
 * (`sendMessage`), the value its JSON text would read back as (json-copy.ts),
 * not as the text itself: writing and reading the text of a batch's tensors
 * was a sixth of the orchestrator's work under load. The two parts share no
 * objects, the message arrives in a later microtask, never inside the sender's
 * call, and the receiver takes it without the schema check a socket's text gets
 * (readLinkMessage): the compiler checked it against the same type.
 */
export class MemorySocket extends EventEmitter {
  readonly OPEN = OPEN;
  readyState: ReadyState = OPEN;
  #peer: MemorySocket | null = null;

  /** A connected pair: what one sends, the other receives. */
  static pair(): [MemorySocket, MemorySocket] {
    const a = new MemorySocket();
    const b = new MemorySocket();
    a.#peer = b;
    b.#peer = a;
    return [a, b];
  }

  /** Text, as over a WebSocket (the link code sends messages with sendMessage; see sendLinkMessage). */
  send(data: string): void {
    this.#deliver(data);
  }

  /** A message as a value: the receiver gets a copy, taken now, in a ClonedMessage. */
  sendMessage(message: object): void {
    if (this.readyState === OPEN) this.#deliver(new ClonedMessage(copyMessage(message)));
  }

  #deliver(data: string | ClonedMessage): void {
    const peer = this.#peer;
    if (this.readyState !== OPEN || !peer) return;
    queueMicrotask(() => {
      if (peer.readyState === OPEN) peer.emit('message', data, false);
    });
  }

  /** Answered at once: the other end is this process. */
  ping(): void {
    queueMicrotask(() => {
      if (this.readyState === OPEN) this.emit('pong');
    });
  }

  /**
   * Both ends close with this code and reason, as a WebSocket's close handshake gives both the same. This end sends
   * nothing more at once; the other end closes after the messages already on their way to it, as a close frame
   * follows the frames sent before it.
   */
  close(code = 1005, reason = ''): void {
    if (this.readyState === CLOSED) return;
    this.#end(code, reason);
    const peer = this.#peer;
    if (peer) queueMicrotask(() => peer.#end(code, reason));
  }

  /** An end without a close frame: 1006 on both sides, as for a dropped connection. */
  terminate(): void {
    this.close(1006);
  }

  #end(code: number, reason: string): void {
    if (this.readyState === CLOSED) return;
    this.readyState = CLOSED;
    queueMicrotask(() => this.emit('close', code, Buffer.from(reason)));
  }
}

/**
 * The copies of the model manifests that `run` messages carry, one per manifest object, frozen to the bottom. A
 * manifest is the same object batch after batch (the registry's), and copying its forty-odd values was the largest
 * part of copying a tiny job's `run`; the receiver gets the same frozen copy each time — still nothing of the
 * sender's, and nothing it could change under the next batch (a write to it throws, as strict-mode code does on a
 * frozen object). A manifest is never changed in place (a new version is a new manifest), so a copy never goes stale;
 * the WeakMap lets it go with its manifest.
 */
const manifestCopies = new WeakMap<object, unknown>();

/** A link message as its JSON text would read back, the manifest of a `run` shared from `manifestCopies`. */
function copyMessage(message: object): unknown {
  const run = message as { type?: unknown; model?: unknown };
  if (run.type !== 'run' || run.model === null || typeof run.model !== 'object') return jsonCopy(message);
  let model = manifestCopies.get(run.model);
  if (model === undefined) {
    model = deepFreeze(jsonCopy(run.model));
    manifestCopies.set(run.model, model);
  }
  const copy = jsonCopy({ ...message, model: undefined }) as Record<string, unknown>;
  copy.model = model;
  return copy;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/** A message that came over an in-process link, already a value (MemorySocket.sendMessage). */
export class ClonedMessage {
  constructor(readonly value: unknown) {}
}

/** What the link code needs to send a message: a WebSocket sends its JSON text; an in-process end, a clone. */
interface MessageSink {
  send(data: string): void;
  sendMessage?(message: object): void;
}

/** Send one link message the cheapest way the socket takes. */
export function sendLinkMessage(socket: MessageSink, message: object): void {
  if (socket.sendMessage) socket.sendMessage(message);
  else socket.send(JSON.stringify(message));
}

/** The check a message from another program passes: a zod schema's safeParse. */
interface MessageSchema<T> {
  safeParse(value: unknown): { success: true; data: T } | { success: false; error: { issues: readonly { path: readonly PropertyKey[]; message: string }[] } };
}

/**
 * A received frame as a message. A WebSocket's text comes from another program: it is parsed (a SyntaxError if it
 * is not JSON) and checked against `schema` (an Error naming what is wrong). An in-process link's message comes from
 * this program — the orchestrator and the agent `gpumesh up` runs beside it —, sent through a function typed with
 * the same message type, and is already a JSON copy of it (nothing shared with the sender): checking it again would
 * guard no boundary and cost a job about 6 KB of garbage and two more copies of its messages (bench/RESULTS.md).
 */
export function readLinkMessage<T>(data: { toString(): string } | ClonedMessage, schema: MessageSchema<T>): T {
  if (data instanceof ClonedMessage) return data.value as T;
  const parsed = schema.safeParse(JSON.parse(data.toString()));
  // An invariant: both ends of an in-memory link are this program; the WebSocket link checks what a remote agent sends.
  if (!parsed.success) throw new Error(parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; '));
  return parsed.data;
}
