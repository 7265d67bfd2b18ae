import { keepNewest } from '../../../protocol/bounded.js';
import type { JobRecord } from '../../store/index.js';

/** Prompts remembered per grant lineage (ComfyUI keeps 10,000 in its history; a client reads the newest). */
const PROMPTS_PER_LINEAGE = 1000;
/** Lineages remembered at once (an open door is one; each grant minted for a ComfyUI client another). */
const LINEAGES = 1000;

/** The idempotency key a door prompt is submitted under: a prompt id names one job of its lineage for 24 h. */
export const promptKey = (promptId: string): string => `comfyui-prompt:${promptId}`;

/** A prompt the door took: the id its client knows it by, and its job (whose record its end updates in place). */
export interface PromptEntry {
  promptId: string;
  job: JobRecord;
}

/**
 * The prompts the door took since the orchestrator started, per grant lineage, oldest first: what `/history`,
 * `/queue` and `/interrupt` read — from memory, since SillyTavern polls the whole history every 100 ms. A prompt from
 * before a restart is still found by its id (`/history/{id}`, through its idempotency key), not listed.
 */
export class PromptBook {
  readonly #byLineage = new Map<string, Map<string, PromptEntry>>();

  add(lineage: string, entry: PromptEntry): void {
    const prompts = this.#byLineage.get(lineage) ?? new Map<string, PromptEntry>();
    // Newest lineage last: the least recently used is forgotten first.
    this.#byLineage.delete(lineage);
    this.#byLineage.set(lineage, prompts);
    keepNewest(this.#byLineage, LINEAGES);
    prompts.delete(entry.promptId);
    prompts.set(entry.promptId, entry);
    keepNewest(prompts, PROMPTS_PER_LINEAGE);
  }

  get(lineage: string, promptId: string): PromptEntry | undefined {
    return this.#byLineage.get(lineage)?.get(promptId);
  }

  /** The lineage's prompts, oldest first. */
  entries(lineage: string): PromptEntry[] {
    return [...this.#byLineage.get(lineage)?.values() ?? []];
  }
}
