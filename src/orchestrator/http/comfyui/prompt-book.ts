import { keepNewest } from '../../../protocol/bounded.js';
import type { JobRecord } from '../../store/index.js';

/** Prompts remembered per grant lineage (ComfyUI keeps 10,000 in its history; a client reads the newest). */
const PROMPTS_PER_LINEAGE = 1000;
/**
 * Prompts remembered in all: each holds its job's record, workflow included (up to the body limit), so the book is
 * bounded as a whole, not only per lineage. Past it, the least recently used lineage's oldest prompt goes first.
 */
const PROMPTS = 5000;

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
  readonly #limits: { perLineage: number; total: number };
  #count = 0;

  constructor(limits: { perLineage: number; total: number } = { perLineage: PROMPTS_PER_LINEAGE, total: PROMPTS }) {
    this.#limits = limits;
  }

  add(lineage: string, entry: PromptEntry): void {
    const prompts = this.#byLineage.get(lineage) ?? new Map<string, PromptEntry>();
    // Newest lineage last: the least recently used is forgotten first.
    this.#byLineage.delete(lineage);
    this.#byLineage.set(lineage, prompts);
    if (prompts.delete(entry.promptId)) this.#count--;
    prompts.set(entry.promptId, entry);
    this.#count++;
    const before = prompts.size;
    keepNewest(prompts, this.#limits.perLineage);
    this.#count -= before - prompts.size;
    while (this.#count > this.#limits.total) this.#forgetOldest();
  }

  /** The oldest prompt of the least recently used lineage, forgotten (with the lineage once it has none). */
  #forgetOldest(): void {
    const [lineage, prompts] = this.#byLineage.entries().next().value!;
    const oldest = prompts.keys().next().value;
    if (oldest !== undefined) {
      prompts.delete(oldest);
      this.#count--;
    }
    if (prompts.size === 0) this.#byLineage.delete(lineage);
  }

  get(lineage: string, promptId: string): PromptEntry | undefined {
    return this.#byLineage.get(lineage)?.get(promptId);
  }

  /** The lineage's prompts, oldest first. */
  entries(lineage: string): PromptEntry[] {
    return [...this.#byLineage.get(lineage)?.values() ?? []];
  }
}
