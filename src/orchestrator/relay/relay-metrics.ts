import { Counter, Gauge, type Registry } from 'prom-client';

export type RelayKind = 'http' | 'ws';
/**
 * How a relay ended: `answered` (an HTTP answer relayed whole; a WebSocket closed by either side), `refused` (before
 * any answer, by the host: not passed through, busy, away), `failed` (ComfyUI unreachable, the link dropped, an idle
 * relay ended, an answer cut off), `client-gone` (the client hung up first).
 */
export type RelayOutcome = 'answered' | 'refused' | 'failed' | 'client-gone';

/** The pass-through's metrics, in the orchestrator's registry (`GET /metrics`). */
export class RelayMetrics {
  readonly #relays: Counter<'host' | 'model' | 'kind' | 'outcome'>;
  readonly #open: Gauge<'host' | 'kind'>;
  readonly #bytes: Counter<'direction'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.#relays = new Counter({
      name: 'gpumesh_passthrough_relays_total', help: 'Requests and WebSockets relayed to hosts\' ComfyUIs, by how they ended (answered, refused, failed, client-gone)',
      labelNames: ['host', 'model', 'kind', 'outcome'], registers,
    });
    this.#open = new Gauge({ name: 'gpumesh_passthrough_relays_open', help: 'Pass-through relays open now, by host and kind (http, ws)', labelNames: ['host', 'kind'], registers });
    this.#bytes = new Counter({
      name: 'gpumesh_passthrough_bytes_total', help: 'Bytes relayed to hosts\' ComfyUIs (to-comfyui) and back (from-comfyui), bodies and WebSocket messages',
      labelNames: ['direction'], registers,
    });
    for (const direction of ['to-comfyui', 'from-comfyui']) this.#bytes.inc({ direction }, 0);
  }

  opened(host: string, kind: RelayKind): void {
    this.#open.inc({ host, kind });
  }

  ended(host: string, model: string, kind: RelayKind, outcome: RelayOutcome): void {
    this.#open.dec({ host, kind });
    this.#relays.inc({ host, model, kind, outcome });
  }

  moved(direction: 'to-comfyui' | 'from-comfyui', bytes: number): void {
    this.#bytes.inc({ direction }, bytes);
  }
}
