import type { Logger } from 'pino';
import { LINK_LIMITS, type AgentMessage, type ModelManifest, type OrchestratorMessage } from '../../protocol/index.js';
import { EngineError, type LoadedModel } from '../core/engine.js';
import type { HostConfig } from '../models/host-config.js';
import type { Residency } from '../models/residency.js';
import { HttpRelay } from './http-relay.js';
import type { RelayEnd, RelayErrorCode, RelayOpen } from './relay-end.js';
import { SocketRelay } from './socket-relay.js';

type RelayMessage = Extract<OrchestratorMessage, { type: 'relay-data' | 'relay-credit' | 'relay-close' }>;

export interface AgentRelaysDeps {
  /** Models are made resident for a relay as for a batch, and held (never unloaded, scaled to zero or evicted) while it lasts. */
  residency: Pick<Residency, 'acquire' | 'release'>;
  /** Which models the host's owner passes through (`passthrough: true`), read from the host's own config, never the orchestrator's manifest. */
  hostConfig: HostConfig;
  send(message: AgentMessage): void;
  /** Why the host takes nothing now (draining, its owner, its hours), or null when it does. */
  refusal(): string | null;
  /** A relay holding `model` ended (an unload the orchestrator asked for may wait for it). */
  released?(model: string): void;
  log: Logger;
}

/** Engine errors a load can meet that pass: the client may try again (a load's room, a server starting). */
const PASSING = new Set(['NO_ROOM', 'NOT_READY', 'HOST_AWAY', 'ENGINE_BUSY']);

/**
 * The agent's side of the ComfyUI pass-through: the orchestrator's `relay-open` for a model this host passes through
 * is answered by a request (or a WebSocket) to that model's ComfyUI — a server the agent starts is loaded first, as a
 * batch would load it, and the model is held for as long as the relay lasts, so a managed ComfyUI is never scaled to
 * zero under an open WebSocket. A model the owner did not open is refused whatever the orchestrator says, as is
 * anything past LINK_LIMITS.relays at once. A dropped link ends every relay.
 */
export class AgentRelays {
  readonly #deps: AgentRelaysDeps;
  readonly #relays = new Map<string, RelayEnd>();
  /** Relays holding each model (loaded for them, or loading). */
  readonly #holding = new Map<string, number>();

  constructor(deps: AgentRelaysDeps) {
    this.#deps = deps;
  }

  /** Relays open now. */
  get size(): number {
    return this.#relays.size;
  }

  /** Whether a relay holds `model` now: the orchestrator's `unload` of it waits, as for a batch. */
  holds(model: string): boolean {
    return (this.#holding.get(model) ?? 0) > 0;
  }

  open(message: RelayOpen): void {
    const { send } = this.#deps;
    const refuse = (code: RelayErrorCode, text: string): void => send({ type: 'relay-close', relayId: message.relayId, error: { code, message: text } });
    if (this.#relays.has(message.relayId)) return refuse('RELAY_FAILED', `relay ${message.relayId} is open already`);
    if (this.#relays.size >= LINK_LIMITS.relays) return refuse('RELAY_UNAVAILABLE', `this host has ${this.#relays.size} relays open, the most a link carries`);
    const closed = this.#closedReason(message.model);
    if (closed) return refuse('PASSTHROUGH_NOT_FOUND', closed);
    const away = this.#deps.refusal();
    if (away) return refuse('RELAY_UNAVAILABLE', away);
    const relay = message.request.kind === 'http'
      ? new HttpRelay(message as RelayOpen & { request: { kind: 'http' } }, send)
      : new SocketRelay(message as RelayOpen & { request: { kind: 'ws' } }, send);
    const model = message.model.name;
    this.#relays.set(relay.id, relay);
    this.#holding.set(model, (this.#holding.get(model) ?? 0) + 1);
    relay.onEnd(() => {
      this.#relays.delete(relay.id);
      const left = (this.#holding.get(model) ?? 1) - 1;
      if (left > 0) this.#holding.set(model, left);
      else this.#holding.delete(model);
    });
    void this.#start(relay, message.model);
  }

  receive(message: RelayMessage): void {
    const relay = this.#relays.get(message.relayId);
    // A relay that ended here while the orchestrator's message was on its way: nothing left to do.
    if (!relay) return;
    switch (message.type) {
      case 'relay-data':
        return relay.data(message);
      case 'relay-credit':
        return relay.credit(message.bytes);
      case 'relay-close':
        return relay.close(message.code, message.reason);
    }
  }

  /** The link dropped: the orchestrator forgot every relay, so every request and socket to ComfyUI is cut off. */
  disconnected(): void {
    for (const relay of [...this.#relays.values()]) relay.close(1001, 'the orchestrator link dropped');
  }

  /** Why the model is not passed through here (by this host's own config), or null when it is. */
  #closedReason(sent: ModelManifest): string | null {
    let manifest: ModelManifest;
    try {
      manifest = this.#deps.hostConfig.apply(sent);
    } catch (error) {
      return (error as Error).message;
    }
    if (manifest.engine !== 'comfyui') return `model "${sent.name}" is a ${manifest.engine} model; only ComfyUI models are passed through`;
    if (manifest.settings?.passthrough !== true) return `the owner of this host has not opened the ComfyUI of model "${sent.name}" to clients (passthrough: true in its host config)`;
    return null;
  }

  /** Load the model (if it is not resident), reach its ComfyUI, and hold the model until the relay ends. */
  async #start(relay: RelayEnd, manifest: ModelManifest): Promise<void> {
    const { residency, log } = this.#deps;
    let loaded: LoadedModel;
    try {
      ({ loaded } = await residency.acquire(manifest));
    } catch (error) {
      const code = error instanceof EngineError ? error.code : 'ENGINE_FAILED';
      const message = error instanceof Error ? error.message : String(error);
      log.warn({ model: manifest.name, code, reason: message }, 'could not load a model for a pass-through');
      return relay.fail(PASSING.has(code) ? 'RELAY_UNAVAILABLE' : 'RELAY_FAILED', `model "${manifest.name}" could not be loaded (${code}): ${message}`);
    }
    relay.onEnd(() => {
      residency.release(loaded);
      this.#deps.released?.(manifest.name);
    });
    const url = loaded.serverUrl?.();
    if (!url) return relay.fail('RELAY_FAILED', `model "${manifest.name}" runs on no server this agent can reach`);
    relay.start(url);
  }
}
