import { LRUCache } from 'lru-cache';
import type { JobView } from '../../../protocol/api/index.js';
import { isTerminal, type Workflow } from '../../../protocol/index.js';
import type { VerifiedGrant } from '../../auth/index.js';
import { IDEMPOTENCY_WINDOW_MS } from '../../jobs/admission.js';
import type { JobReads } from '../../jobs/index.js';
import type { JobRecord } from '../../store/index.js';
import { failedNode, outputsOf, promptFields, type NodeOutput } from './outputs.js';
import { promptKey, type PromptBook, type PromptEntry } from './prompt-book.js';

/** A prompt in ComfyUI's history: `prompt` is `[number, prompt_id, workflow, extra_data, outputs_to_execute]`. */
export interface HistoryItem {
  prompt: [number, string, Workflow, Record<string, unknown>, string[]];
  outputs: Record<string, NodeOutput>;
  status: { status_str: 'success' | 'error'; completed: boolean; messages: [string, Record<string, unknown>][] };
  meta: Record<string, { node_id: string; display_node: string; parent_node: null; real_node_id: string }>;
}

/** Finished prompts `/history` lists when it is not told how many (`max_items`): the newest, which is what clients look for. */
export const HISTORY_DEFAULT_ITEMS = 64;
/** Rendered history items kept (a finished job's never changes). */
const RENDERED = 2000;

const ms = (iso: string | null): number => (iso === null ? 0 : Date.parse(iso));

/** What ComfyUI sends when a prompt ends otherwise than well, as its history keeps it. */
export function endMessage(view: JobView, promptId: string): [string, Record<string, unknown>] {
  const timestamp = ms(view.finishedAt);
  const error = view.error ?? { code: view.status.toUpperCase(), message: `the job ended ${view.status}` };
  const { node, type } = failedNode(error.message);
  if (view.status === 'failed') {
    return ['execution_error', {
      prompt_id: promptId, node_id: node, node_type: type, executed: [], exception_message: error.message, exception_type: error.code,
      traceback: [], current_inputs: {}, current_outputs: {}, timestamp,
    }];
  }
  return ['execution_interrupted', { prompt_id: promptId, node_id: node, node_type: type, executed: [], timestamp }];
}

/** A finished workflow job as ComfyUI's history item of it. */
export function historyItem(job: JobRecord, view: JobView, promptId: string): HistoryItem {
  const { extraData } = promptFields(job.input);
  const outputs = view.status === 'succeeded' ? outputsOf(view) : {};
  const started = { prompt_id: promptId, timestamp: ms(view.createdAt) };
  const messages: [string, Record<string, unknown>][] = [['execution_start', started], ['execution_cached', { nodes: [], ...started }]];
  messages.push(view.status === 'succeeded' ? ['execution_success', { prompt_id: promptId, timestamp: ms(view.finishedAt) }] : endMessage(view, promptId));
  const meta = Object.fromEntries(Object.keys(outputs).map((node) => [node, { node_id: node, display_node: node, parent_node: null, real_node_id: node }]));
  return {
    prompt: [job.seq, promptId, job.input.workflow as Workflow, extraData, Object.keys(outputs)],
    outputs,
    status: { status_str: view.status === 'succeeded' ? 'success' : 'error', completed: view.status === 'succeeded', messages },
    meta,
  };
}

/**
 * ComfyUI's history of a grant lineage's prompts: finished ones only (as ComfyUI, whose clients take an entry's
 * presence for the prompt's end). Each finished prompt is rendered once and kept as its JSON, so the whole history a
 * client polls every 100 ms costs a walk over the lineage's prompts in memory and the joining of strings.
 */
export class PromptHistory {
  readonly #reads: Pick<JobReads, 'viewOf' | 'byKey'>;
  readonly #book: PromptBook;
  readonly #rendered = new LRUCache<string, string>({ max: RENDERED });

  constructor(deps: { reads: Pick<JobReads, 'viewOf' | 'byKey'>; book: PromptBook }) {
    this.#reads = deps.reads;
    this.#book = deps.book;
  }

  /** A prompt of the grant's lineage by its id: taken since the start, else by its key (for 24 h); null if none it may see. */
  async find(grant: VerifiedGrant, promptId: string): Promise<PromptEntry | null> {
    const entry = this.#book.get(grant.id, promptId);
    if (entry) return entry;
    const job = await this.#reads.byKey(grant, promptKey(promptId), IDEMPOTENCY_WINDOW_MS);
    return job?.type === 'workflow' ? { promptId, job } : null;
  }

  /** `GET /history`: the newest `maxItems` finished prompts of the lineage, oldest first, as one JSON text. */
  async all(grant: VerifiedGrant, maxItems: number = HISTORY_DEFAULT_ITEMS): Promise<string> {
    const finished = this.#book.entries(grant.id).filter((entry) => isTerminal(entry.job.status)).slice(-maxItems);
    const items = await Promise.all(finished.map(async (entry) => `${JSON.stringify(entry.promptId)}:${await this.#item(entry)}`));
    return `{${items.join(',')}}`;
  }

  /** `GET /history/{prompt_id}`: `{ <id>: item }` once it finished, `{}` before (or for a prompt the grant may not see). */
  async one(grant: VerifiedGrant, promptId: string): Promise<string> {
    const entry = await this.find(grant, promptId);
    if (!entry || !isTerminal(entry.job.status)) return '{}';
    return `{${JSON.stringify(promptId)}:${await this.#item(entry)}}`;
  }

  async #item(entry: PromptEntry): Promise<string> {
    const cached = this.#rendered.get(entry.job.id);
    if (cached !== undefined) return cached;
    const text = JSON.stringify(historyItem(entry.job, await this.#reads.viewOf(entry.job), entry.promptId));
    this.#rendered.set(entry.job.id, text);
    return text;
  }
}
