import type { Logger } from 'pino';
import { familyOf, type AgentMessage, type NodeCatalogue } from '../../protocol/index.js';
import type { Engine, LoadedModel } from '../core/engine.js';
import type { HostConfig } from './host-config.js';

export interface CataloguesDeps {
  engines: ReadonlyMap<string, Engine>;
  hostConfig: HostConfig;
  send(message: Extract<AgentMessage, { type: 'catalogue' }>): void;
  log: Logger;
}

/**
 * Tells the orchestrator which of this host's models run clients' whole workflows (their owner's opt-in, ComfyUI's
 * `acceptWorkflows`) and what each one's server offers them, so the mesh sends a workflow only where its nodes and
 * models are: after each welcome (every such model the host's config declares, from the server the owner runs, or
 * from the loaded model), and whenever such a model loads (a server the agent starts is up only then). Only to an
 * orchestrator that takes the report (its welcome says so).
 */
export class Catalogues {
  readonly #deps: CataloguesDeps;
  /** Loaded models that run clients' workflows, by the name the host declares them under. */
  readonly #loaded = new Map<string, LoadedModel>();
  #takes = false;

  constructor(deps: CataloguesDeps) {
    this.#deps = deps;
  }

  /** Linked (again): report every declared model that takes workflows, if the orchestrator takes reports. */
  welcomed(takesCatalogues: boolean): void {
    this.#takes = takesCatalogues;
    if (!takesCatalogues) return;
    for (const model of this.#deps.hostConfig.declared) void this.#report(model);
  }

  loaded(handle: LoadedModel): void {
    if (!handle.catalogue) return;
    const model = familyOf(handle.manifest.name);
    this.#loaded.set(model, handle);
    if (this.#takes) void this.#report(model);
  }

  unloaded(name: string): void {
    this.#loaded.delete(familyOf(name));
  }

  async #report(model: string): Promise<void> {
    let nodes: NodeCatalogue | null | undefined;
    try {
      nodes = await this.#describe(model);
    } catch (error) {
      this.#deps.log.warn({ err: error, model }, 'could not tell what the model\'s server offers workflows');
      return;
    }
    if (nodes === undefined || !this.#takes) return;
    this.#deps.send({ type: 'catalogue', model, nodes });
  }

  /** The loaded model's own word, else the engines' for the host's settings of it (undefined: it takes no workflows). */
  async #describe(model: string): Promise<NodeCatalogue | null | undefined> {
    const handle = this.#loaded.get(model);
    if (handle?.catalogue) return handle.catalogue();
    const settings = this.#deps.hostConfig.settingsOf(model);
    if (!settings) return undefined;
    for (const engine of this.#deps.engines.values()) {
      const described = await engine.describe?.(settings);
      if (described !== undefined) return described;
    }
    return undefined;
  }
}
