import type { WebSocket } from 'ws';
import { isTerminalEvent, type JobEvent } from '../../../protocol/api/index.js';
import { isTerminal, type Workflow } from '../../../protocol/index.js';
import type { EventBus } from '../../events/event-bus.js';
import type { JobReads } from '../../jobs/index.js';
import { endMessage } from './history.js';
import { outputsOf } from './outputs.js';
import type { PromptBook, PromptEntry } from './prompt-book.js';

/** Sockets one client id of one lineage may hold open at once; a new one beyond it closes the oldest. */
const SOCKETS_PER_CLIENT = 16;
/** ComfyUI's binary event PREVIEW_IMAGE and its image format PNG (server.py's send_image): each a 4-byte big-endian integer. */
const PREVIEW_IMAGE = 1;
const PNG = 2;
/**
 * What a socket may have waiting to be sent: a client that stops reading is cut off rather than buffered for without
 * end (a prompt's messages are a few per step and three previews; 4 MiB is many prompts' worth).
 */
const MAX_BUFFERED_BYTES = 4 * 1024 * 1024;

/** Send to an open socket, or cut off one that has stopped reading. */
function deliver(socket: WebSocket, data: string | Buffer): void {
  if (socket.readyState !== socket.OPEN) return;
  if (socket.bufferedAmount > MAX_BUFFERED_BYTES) {
    socket.terminate();
    return;
  }
  socket.send(data, { binary: typeof data !== 'string' });
}

/** The node a workflow's progress is told against: its first sampler (a node with whole-number `steps`), else its first node. */
function progressNode(workflow: Workflow): string {
  const entries = Object.entries(workflow);
  return (entries.find(([, node]) => Number.isInteger(node.inputs.steps)) ?? entries[0])?.[0] ?? '0';
}

/** A preview as ComfyUI frames it: PREVIEW_IMAGE, PNG, then the picture. */
export function previewFrame(png: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header.writeUInt32BE(PREVIEW_IMAGE, 0);
  header.writeUInt32BE(PNG, 4);
  return Buffer.concat([header, png]);
}

/**
 * ComfyUI's `/ws` for the door's clients: each socket is a client id of a grant lineage, and hears of that client's
 * prompts only, told from the mesh's job events as ComfyUI tells them — `status` on opening and as the lineage's queue
 * changes; `execution_start` and `execution_cached` when the job starts; `executing` and `progress` for its sampling;
 * binary preview frames (PREVIEW_IMAGE, PNG); at its end `executing` and `executed` with the files of each node,
 * `execution_success` (or `execution_error`, `execution_interrupted`), and `executing` with `node: null`, which is
 * what clients wait for.
 */
export class ClientSockets {
  readonly #events: EventBus;
  readonly #reads: Pick<JobReads, 'viewOf'>;
  readonly #book: PromptBook;
  readonly #sockets = new Map<string, Set<WebSocket>>();

  constructor(deps: { events: EventBus; reads: Pick<JobReads, 'viewOf'>; book: PromptBook }) {
    this.#events = deps.events;
    this.#reads = deps.reads;
    this.#book = deps.book;
  }

  /** A client's socket, opened: it hears `status` now, and its prompts' messages from now on. */
  attach(lineage: string, clientId: string, socket: WebSocket): void {
    const key = keyOf(lineage, clientId);
    const sockets = this.#sockets.get(key) ?? new Set<WebSocket>();
    this.#sockets.set(key, sockets);
    sockets.add(socket);
    if (sockets.size > SOCKETS_PER_CLIENT) sockets.values().next().value!.close(1008, 'too many sockets for this client id');
    socket.on('close', () => {
      sockets.delete(socket);
      if (sockets.size === 0 && this.#sockets.get(key) === sockets) this.#sockets.delete(key);
    });
    // What a client sends (the ComfyUI page's feature flags) asks nothing of the door.
    socket.on('message', () => {});
    socket.send(JSON.stringify({ type: 'status', data: { ...this.#status(lineage), sid: clientId } }));
  }

  /** Tell a prompt's client of it as it goes (nothing is sent while it has no socket open). */
  watch(lineage: string, clientId: string, entry: PromptEntry): void {
    const { job, promptId } = entry;
    const key = keyOf(lineage, clientId);
    const workflow = job.input.workflow as Workflow;
    const node = progressNode(workflow);
    let started = false;
    let executing: string | null = null;
    let ended = false;
    const send = (type: string, data: Record<string, unknown>): void => {
      const text = JSON.stringify({ type, data });
      for (const socket of this.#sockets.get(key) ?? []) deliver(socket, text);
    };
    const start = (): void => {
      if (started) return;
      started = true;
      const timestamp = this.#events.clock.now();
      send('execution_start', { prompt_id: promptId, timestamp });
      send('execution_cached', { nodes: [], prompt_id: promptId, timestamp });
    };
    const at = (next: string): void => {
      if (executing === next) return;
      executing = next;
      send('executing', { node: next, display_node: next, prompt_id: promptId });
    };
    const end = async (): Promise<void> => {
      if (ended) return;
      ended = true;
      unsubscribe();
      const view = await this.#reads.viewOf(job);
      start();
      if (view.status === 'succeeded') {
        for (const [output, files] of Object.entries(outputsOf(view))) {
          at(output);
          send('executed', { node: output, display_node: output, output: files, prompt_id: promptId });
        }
        send('execution_success', { prompt_id: promptId, timestamp: this.#events.clock.now() });
      } else {
        const [type, data] = endMessage(view, promptId);
        send(type, data);
      }
      send('executing', { node: null, prompt_id: promptId });
      this.#tellStatus(lineage);
    };
    const relay = (event: JobEvent): void => {
      switch (event.type) {
        case 'running':
          start();
          return at(node);
        case 'progress':
          start();
          at(node);
          return send('progress', { value: event.step, max: event.total, prompt_id: promptId, node });
        case 'preview': {
          start();
          const frame = previewFrame(Buffer.from(event.b64, 'base64'));
          for (const socket of this.#sockets.get(key) ?? []) deliver(socket, frame);
          return;
        }
        default:
          if (isTerminalEvent(event)) void end();
      }
    };
    const unsubscribe = this.#events.subscribeJob(job.id, (scoped) => relay(scoped.event));
    this.#tellStatus(lineage);
    // It may have started, or even ended, while its admission was being written.
    if (job.status === 'running') relay({ type: 'running', jobId: job.id, host: '', at: '' });
    if (isTerminal(job.status)) void end();
  }

  /** `status` to every socket of the lineage: how many of its prompts are still to run. */
  #tellStatus(lineage: string): void {
    const text = JSON.stringify({ type: 'status', data: this.#status(lineage) });
    const prefix = keyOf(lineage, '');
    for (const [key, sockets] of this.#sockets) {
      if (!key.startsWith(prefix)) continue;
      for (const socket of sockets) deliver(socket, text);
    }
  }

  #status(lineage: string): { status: { exec_info: { queue_remaining: number } } } {
    const remaining = this.#book.entries(lineage).filter((entry) => !isTerminal(entry.job.status)).length;
    return { status: { exec_info: { queue_remaining: remaining } } };
  }
}

const keyOf = (lineage: string, clientId: string): string => `${lineage}\n${clientId}`;
