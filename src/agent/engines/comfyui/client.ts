import { ServerHttp, type ServerHttpOptions } from '../kit/http.js';
import { ServerError } from '../kit/server-error.js';
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

/** `POST /upload/image` → where the file went: LoadImage names it `subfolder/name`. */
export interface Uploaded {
  name: string;
  subfolder: string;
  type: string;
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

  /** Every node class the server has, with its inputs and outputs (what a client may put in a workflow). */
  objectInfo(): Promise<unknown> {
    return this.json<unknown>('GET', '/object_info');
  }

  systemStats(): Promise<SystemStats> {
    return this.json<SystemStats>('GET', '/system_stats');
  }

  /**
   * Wait up to `windowMs` for a server that refuses connections (starting, restarting) to answer `/system_stats`,
   * trying with a backoff of 100 ms growing to 2 s. Throws the last failure once the window is over.
   */
  async untilReady(windowMs: number): Promise<void> {
    const answer = await this.untilAnswered('/system_stats', Math.max(windowMs, 1));
    if (answer instanceof ServerError) throw answer;
  }

  /**
   * A picture into ComfyUI's input folder (`POST /upload/image`, multipart as its own page sends it), overwriting a
   * file of the same name: the names are the job's own, and a retried job sends the same picture again.
   */
  uploadImage(png: Uint8Array, name: string, subfolder: string): Promise<Uploaded> {
    return this.#upload('/upload/image', png, name, { subfolder, type: 'input', overwrite: 'true' });
  }

  /**
   * A mask (`POST /upload/mask`): ComfyUI lays its alpha over the picture `original` names and saves that as `name`,
   * so a LoadImage (its MASK output) or LoadImageMask (channel alpha) node reads the mask from it. `original.type`
   * is given: the server's default for it is `output`.
   */
  uploadMask(png: Uint8Array, name: string, subfolder: string, original: Uploaded): Promise<Uploaded> {
    return this.#upload('/upload/mask', png, name, {
      subfolder, type: 'input', overwrite: 'true', original_ref: JSON.stringify({ filename: original.name, subfolder: original.subfolder, type: original.type }),
    });
  }

  async #upload(path: string, png: Uint8Array, name: string, fields: Record<string, string>): Promise<Uploaded> {
    const form = new FormData();
    form.append('image', new Blob([new Uint8Array(png)], { type: 'image/png' }), name);
    for (const [key, value] of Object.entries(fields)) form.append(key, value);
    // The multipart body as fetch would send it, boundary and all.
    const encoded = new Request('http://multipart.invalid/', { method: 'POST', body: form });
    const body = new Uint8Array(await encoded.arrayBuffer());
    const uploaded = await this.json<Uploaded | undefined>('POST', path, { body, headers: { 'content-type': encoded.headers.get('content-type')! }, idempotent: true });
    if (!uploaded || typeof uploaded.name !== 'string') throw this.unexpected(`POST ${path}`, `the answer names no file: ${JSON.stringify(uploaded)}`);
    return { name: uploaded.name, subfolder: typeof uploaded.subfolder === 'string' ? uploaded.subfolder : (fields.subfolder ?? ''), type: typeof uploaded.type === 'string' ? uploaded.type : 'input' };
  }

  async free(): Promise<void> {
    await this.send('POST', '/free', { json: { unload_models: true, free_memory: true }, idempotent: true });
  }
}
