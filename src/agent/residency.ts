import type { Logger } from 'pino';
import type { Device, ModelManifest, ResidentModel } from '../protocol/index.js';
import { EngineError, type Engine, type LoadedModel } from './engines/engine.js';
import type { ModelCache } from './model-cache.js';

interface Entry {
  loaded: LoadedModel;
  /** Memory counted against the device budget: the larger of the manifest's figure and the measured one. */
  chargedMB: number;
  inUse: number;
  lastUsedAt: number;
}

export interface ResidencyEvents {
  loaded(model: ResidentModel): void;
  unloaded(model: { model: string; digest: string; device: string }): void;
}

/**
 * Which models are loaded on which device, under each device's memory budget.
 * A model is loaded on demand on the device with the most room; to make room,
 * idle models are evicted least recently used first. A model larger than
 * every budget is refused outright.
 */
export class Residency {
  readonly #engines: ReadonlyMap<string, Engine>;
  readonly #devices: () => Device[];
  readonly #cache: ModelCache;
  readonly #events: ResidencyEvents;
  readonly #log: Logger;
  readonly #entries = new Map<string, Entry>();
  readonly #loading = new Map<string, Promise<Entry>>();

  constructor(deps: { engines: ReadonlyMap<string, Engine>; devices: () => Device[]; cache: ModelCache; events: ResidencyEvents; log: Logger }) {
    this.#engines = deps.engines;
    this.#devices = deps.devices;
    this.#cache = deps.cache;
    this.#events = deps.events;
    this.#log = deps.log;
  }

  /** Make a model resident and mark it in use; returns it and how long loading took (0 if it was resident). */
  async acquire(manifest: ModelManifest): Promise<{ loaded: LoadedModel; loadMs: number }> {
    const started = performance.now();
    let entry = this.#entries.get(manifest.name);
    if (entry && entry.loaded.manifest.digest !== manifest.digest) {
      await this.unload(manifest.name); // a new version of the model
      entry = undefined;
    }
    let loadMs = 0;
    if (!entry) {
      let loading = this.#loading.get(manifest.name);
      if (!loading) {
        loading = this.#load(manifest).finally(() => this.#loading.delete(manifest.name));
        this.#loading.set(manifest.name, loading);
      }
      entry = await loading;
      loadMs = performance.now() - started;
    }
    entry.inUse++;
    entry.lastUsedAt = Date.now();
    return { loaded: entry.loaded, loadMs };
  }

  release(name: string): void {
    const entry = this.#entries.get(name);
    if (!entry) return;
    entry.inUse = Math.max(0, entry.inUse - 1);
    entry.lastUsedAt = Date.now();
  }

  resident(): ResidentModel[] {
    return [...this.#entries.values()].map((entry) => ({
      model: entry.loaded.manifest.name, digest: entry.loaded.manifest.digest, device: entry.loaded.device.id,
      memoryMB: entry.loaded.memoryMB, lastUsedAt: entry.lastUsedAt,
    }));
  }

  /** Memory charged on each device. */
  usedMB(deviceId: string): number {
    let used = 0;
    for (const entry of this.#entries.values()) if (entry.loaded.device.id === deviceId) used += entry.chargedMB;
    return used;
  }

  async unload(name: string): Promise<void> {
    const entry = this.#entries.get(name);
    if (!entry) return;
    this.#entries.delete(name);
    await entry.loaded.unload();
    this.#log.info({ model: name, device: entry.loaded.device.id }, 'model unloaded');
    this.#events.unloaded({ model: name, digest: entry.loaded.manifest.digest, device: entry.loaded.device.id });
  }

  /** Unload every model idle for at least `idleMs` (scale to zero). Returns the names unloaded. */
  async unloadIdle(idleMs: number, now = Date.now()): Promise<string[]> {
    const idle = [...this.#entries.entries()].filter(([, entry]) => entry.inUse === 0 && now - entry.lastUsedAt >= idleMs).map(([name]) => name);
    for (const name of idle) await this.unload(name);
    return idle;
  }

  async unloadAll(): Promise<void> {
    for (const name of [...this.#entries.keys()]) await this.unload(name);
  }

  async #load(manifest: ModelManifest): Promise<Entry> {
    const engine = this.#engines.get(manifest.engine);
    if (!engine) throw new EngineError('ENGINE_FAILED', `this host has no "${manifest.engine}" engine`, true);
    const device = await this.#placeFor(manifest);
    const path = await this.#cache.path(manifest.digest);
    const loaded = await engine.load(manifest, path, device);
    const entry: Entry = { loaded, chargedMB: Math.max(manifest.memoryMB, loaded.memoryMB), inUse: 0, lastUsedAt: Date.now() };
    this.#entries.set(manifest.name, entry);
    this.#log.info({ model: manifest.name, device: device.id, memoryMB: loaded.memoryMB }, 'model loaded');
    this.#events.loaded({ model: manifest.name, digest: manifest.digest, device: device.id, memoryMB: loaded.memoryMB, lastUsedAt: entry.lastUsedAt });
    return entry;
  }

  /** The device to load on, after evicting idle models there if needed. */
  async #placeFor(manifest: ModelManifest): Promise<Device> {
    const devices = this.#devices();
    const largest = Math.max(0, ...devices.map((device) => device.budgetMB));
    if (manifest.memoryMB > largest) {
      throw new EngineError('MODEL_TOO_LARGE', `model "${manifest.name}" needs ${manifest.memoryMB} MB, more than the largest budget (${largest} MB)`, true);
    }
    const free = (device: Device): number => device.budgetMB - this.usedMB(device.id);
    const byRoom = [...devices].sort((a, b) => free(b) - free(a));
    const roomy = byRoom.find((device) => free(device) >= manifest.memoryMB);
    if (roomy) return roomy;
    for (const device of byRoom) {
      const evictable = [...this.#entries.values()]
        .filter((entry) => entry.loaded.device.id === device.id && entry.inUse === 0)
        .sort((a, b) => a.lastUsedAt - b.lastUsedAt);
      const reclaimable = evictable.reduce((sum, entry) => sum + entry.chargedMB, 0);
      if (free(device) + reclaimable < manifest.memoryMB) continue;
      for (const entry of evictable) {
        if (free(device) >= manifest.memoryMB) break;
        this.#log.info({ evict: entry.loaded.manifest.name, for: manifest.name, device: device.id }, 'evicting least recently used model');
        await this.unload(entry.loaded.manifest.name);
      }
      return device;
    }
    throw new EngineError('NO_ROOM', `no device has room for "${manifest.name}" (${manifest.memoryMB} MB) while the models there are busy or held`, true);
  }
}
