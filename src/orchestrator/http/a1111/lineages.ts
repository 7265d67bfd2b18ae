import type { EventBus } from '../../events/event-bus.js';
import type { JobRecord } from '../../store/index.js';
import { Generation } from './progress.js';
import type { GenerationKind } from './requests.js';

/** What the door remembers of one grant lineage (the grant the orchestrator minted and every narrowing of it). */
interface LineageState {
  /** The checkpoint title it chose (`POST /sdapi/v1/options`), or null: the default. */
  checkpoint: string | null;
  /** Its txt2img and img2img requests whose jobs are still being made. */
  generations: Set<Generation>;
}

/** How many lineages the door remembers; past it, those least recently seen with nothing being made are forgotten. */
const DEFAULT_LIMIT = 10_000;

/**
 * A1111 is one process with one current model and one piece of work at a time; the mesh serves many callers, so the
 * door keeps that state per grant lineage, in memory: the model a caller chose through the options (each lineage
 * its own, so one caller's switch never changes another's pictures) and the generations `/progress`, `/interrupt`
 * and `/skip` are about (its own, never another's). Nothing is written: after a restart each lineage is back on the
 * default model, which is what A1111 clients check and set again (they read the options before they generate). The
 * map is bounded (`limit`, least recently seen first); a lineage with work in flight is never forgotten.
 */
export class A1111Lineages {
  readonly #states = new Map<string, LineageState>();
  readonly #limit: number;

  constructor(limit = DEFAULT_LIMIT) {
    this.#limit = limit;
  }

  /** The checkpoint title a lineage chose, or null. */
  checkpoint(lineage: string): string | null {
    return this.#states.get(lineage)?.checkpoint ?? null;
  }

  choose(lineage: string, title: string): void {
    this.#touch(lineage).checkpoint = title;
  }

  /** Follow a request's jobs for `/progress` until they have all ended. */
  start(lineage: string, kind: GenerationKind, records: readonly JobRecord[], events: EventBus): Generation {
    const state = this.#touch(lineage);
    const generation = new Generation(kind, records, events, (ended) => state.generations.delete(ended));
    if (!generation.over) state.generations.add(generation);
    return generation;
  }

  /**
   * A lineage's generations still being made, oldest first; with `visible`, only those whose every job it passes (the
   * lineage is shared by every narrowing of its grant, and a narrowing sees only the jobs it may read).
   */
  generations(lineage: string, visible?: (record: JobRecord) => boolean): Generation[] {
    const all = [...this.#states.get(lineage)?.generations ?? []];
    return visible ? all.filter((generation) => generation.records.every(visible)) : all;
  }

  /** How many lineages are remembered (for tests of the bound). */
  get size(): number {
    return this.#states.size;
  }

  #touch(lineage: string): LineageState {
    const state = this.#states.get(lineage) ?? { checkpoint: null, generations: new Set<Generation>() };
    // Map order is the order of last use: delete and set again moves it to the end.
    this.#states.delete(lineage);
    this.#states.set(lineage, state);
    if (this.#states.size > this.#limit) this.#forget(lineage);
    return state;
  }

  #forget(keep: string): void {
    for (const [lineage, state] of this.#states) {
      if (this.#states.size <= this.#limit) return;
      if (state.generations.size === 0 && lineage !== keep) this.#states.delete(lineage);
    }
  }
}
