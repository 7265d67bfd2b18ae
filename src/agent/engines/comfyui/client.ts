import { ServerHttp, type ServerHttpOptions } from '../kit/http.js';
import type { Workflow } from '../../../protocol/engines/comfyui.js';

/** One output file as ComfyUI lists it in history and `executed` messages. */
export interface ComfyFileRef {
  filename: string;
  subfolder: string;
  type: string;
}

/** `GET /history/{prompt_id}` → `{ [prompt_id]: HistoryEntry }` once the prompt has run. */
export interface HistoryEntry {
  outputs: Record<string, Record<string, unknown>>;
  status?: { status_str?: 'success' | 'error'; completed?: boolean; messages?: [string, Record<string, unknown>][] };
}

/** `POST /prompt` → the prompt's id and its place in the queue. */
export interface Submitted {
  prompt_id: string;
  number: number;
  node_errors?: Record<string, unknown>;
}

export interface SystemStats {
  devices?: { name?: string; type?: string; index?: number | null; vram_total?: number; vram_free?: number; torch_vram_total?: number; torch_vram_free?: number }[];
}

/** Queue entries are `[number, prompt_id, prompt, extra_data, outputs_to_execute]`. */
interface QueueState {
  queue_running?: unknown[][];
  queue_pending?: unknown[][];
}

/** ComfyUI's HTTP routes (docs.comfy.org, "comms_routes"), one method each. */
export class ComfyClient extends ServerHttp {
  constructor(options: Omit<ServerHttpOptions, 'name'>) {
    super({ ...options, name: 'ComfyUI' });
  }

  /**
   * Queue a prompt. We propose its id (newer servers take it; older ones make
   * their own and we use whatever comes back). Not idempotent: a dropped
   * connection is not retried, since the prompt may already be queued.
   */
  submit(workflow: Workflow, clientId: string, promptId: string): Promise<Submitted> {
    return this.json<Submitted>('POST', '/prompt', { json: { prompt: workflow, client_id: clientId, prompt_id: promptId } });
  }

  async history(promptId: string): Promise<HistoryEntry | null> {
    const all = await this.json<Record<string, HistoryEntry> | undefined>('GET', `/history/${encodeURIComponent(promptId)}`);
    return all?.[promptId] ?? null;
  }

  async view(file: ComfyFileRef): Promise<{ bytes: Uint8Array; contentType: string | null }> {
    const query = new URLSearchParams({ filename: file.filename, subfolder: file.subfolder ?? '', type: file.type ?? 'output' });
    const reply = await this.request('GET', `/view?${query}`, { headers: { accept: '*/*' } });
    return { bytes: new Uint8Array(reply.bytes), contentType: reply.headers['content-type'] ?? null };
  }

  /** Stop the running prompt. Servers that know `prompt_id` stop it only if it is that prompt. */
  async interrupt(promptId: string): Promise<void> {
    await this.send('POST', '/interrupt', { json: { prompt_id: promptId }, idempotent: true });
  }

  /** Take prompts that have not started out of the queue. */
  async deleteQueued(promptIds: string[]): Promise<void> {
    await this.send('POST', '/queue', { json: { delete: promptIds }, idempotent: true });
  }

  /** Which of our prompts are running and which still wait. */
  async queue(): Promise<{ running: Set<string>; pending: Set<string> }> {
    const state = await this.json<QueueState | undefined>('GET', '/queue');
    const ids = (entries: unknown[][] | undefined): Set<string> => new Set((entries ?? []).map((entry) => String(entry[1])));
    return { running: ids(state?.queue_running), pending: ids(state?.queue_pending) };
  }

  systemStats(): Promise<SystemStats> {
    return this.json<SystemStats>('GET', '/system_stats');
  }

  async free(): Promise<void> {
    await this.send('POST', '/free', { json: { unload_models: true, free_memory: true }, idempotent: true });
  }
}
