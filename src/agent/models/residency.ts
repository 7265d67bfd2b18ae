import type { Logger } from 'pino';
import type { BatchMemoryReport, Device, LoadPhases, ModelManifest, ResidentModel } from '../../protocol/index.js';
import { EngineError, type BatchMemory, type Engine, type LoadedModel } from '../core/engine.js';
import { sleep, systemClock, type Clock, type Timer } from '../../protocol/clock.js';
import type { ModelCache } from './model-cache.js';
import { HostConfig } from './host-config.js';

const NO_HOST_CONFIG = HostConfig.none();
import { RestartBackoff, type RestartBackoffOptions } from './restart-backoff.js';

interface Entry {
  loaded: LoadedModel;
  /** The manifest as the orchestrator sent it (the engine loaded it as the host's config says): a later one is compared to it. */
  sent: ModelManifest;
  loadedAt: number;
  /** Where the load's time went (every batch that waited for this load reports the same). */
  phases: LoadPhases;
  /** What the model holds now, as last measured (after load, then after each batch). */
  heldMB: number;
  /** The most it held during any batch since it loaded: a running maximum, never lowered by a later sample. */
  peakMB: number;
  /** The largest batch (pixels per job × jobs) it ran since it loaded. */
  largestUnits: number;
  inUse: number;
  lastUsedAt: number;
  /** Armed while the model is idle, for a model with an idle window of its own (`LoadedModel.idleUnloadMs`). */
  idleTimer: Timer | null;
}

export interface ResidencyEvents {
  /** A model was made resident; `handle` is it as its engine loaded it. */
  loaded(model: ResidentModel, handle: LoadedModel): void;
  unloaded(model: { model: string; digest: string; device: string }): void;
}


export interface ResidencyDeps {
  engines: ReadonlyMap<string, Engine>;
  devices: () => Device[];
  cache: ModelCache;
  /**
   * The host's own config: every manifest is loaded as it says (HostConfig.apply), so a command, a server or a file
   * of the host comes only from its owner. Default: a host that declares nothing (data models only).
   */
  hostConfig?: HostConfig;
  events: ResidencyEvents;
  log: Logger;
  /** Pacing of restarts after engine crashes. */
  restarts?: RestartBackoffOptions;
  /** Time: when models were last used, their own idle windows, the pause before a crashed engine starts again. Default: real time. */
  clock?: Clock;
}

const NEVER_ABORTED = new AbortController().signal;

/**
 * Which models are loaded on which device, under each device's memory budget.
 * A model is loaded on demand on the device with the most room; to make room,
 * idle models are evicted least recently used first. A model larger than
 * every budget is refused outright.
 *
 * Memory is charged as measured, never as declared: a model's manifest figure
 * is only the first guess, used to place it before it has ever loaded on this
 * host. Once loaded it is charged what its engine measured: the largest peak
 * any of its batches reached (or what it holds, if more) — a running maximum,
 * busy or idle. What it holds after a batch is a sample taken once the batch
 * released what it could, and how much it released depends on timing (the
 * allocator, a collection that did or did not run): charging that sample made
 * the device's budget forget a batch's peak in some runs and not others, and the
 * next batch of the same size would need the peak again.
 *
 * A model whose engine process dies is dropped at once (and reported
 * unloaded); the next batch that needs it loads it afresh, after a pause that
 * grows if the engine keeps dying (RestartBackoff).
 *
 * A model without a file (`manifest.file` false: a server that loads its own
 * weights, a URL the person runs) is loaded without a pull. A model with an
 * idle window of its own (a server the agent started, `idleStopMs`) is
 * unloaded that long after its last batch — its server stops with it — rather
 * than at the agent's sweep.
 */
export class Residency {
  readonly #deps: ResidencyDeps;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #restarts: RestartBackoff;
  readonly #entries = new Map<string, Entry>();
  readonly #loading = new Map<string, Promise<Entry>>();
  /**
   * Memory set aside on each device (by id) for loads in progress: two models that cannot both fit, asked for at
   * once, must not both be placed on a device that holds neither yet.
   */
  readonly #reservedMB = new Map<string, number>();
  /**
   * The working peak of each model version here — what it took to load, raised by every batch that peaked higher —
   * remembered across unloads: the next load is placed where its batches will fit, not just its weights.
   */
  readonly #measuredMB = new Map<string, number>();
  /** Told when a model's charge on its device grew (a batch peaked higher than any before). */
  #onCharged: () => void = () => {};

  constructor(deps: ResidencyDeps) {
    this.#deps = deps;
    this.#log = deps.log;
    this.#clock = deps.clock ?? systemClock;
    this.#restarts = new RestartBackoff(deps.restarts);
  }

  /**
   * Make a model resident and mark it in use; returns it and how long loading took (0 if it was resident), with
   * where that time went when it waited for a load (`phases`). `onLoading` is called, before the wait, when the
   * model is not resident (this batch waits for a load).
   */
  async acquire(manifest: ModelManifest, onLoading?: () => void): Promise<{ loaded: LoadedModel; loadMs: number; phases?: LoadPhases }> {
    const started = performance.now();
    let entry = this.#entries.get(manifest.name);
    if (entry && !sameVersion(entry.sent, manifest)) {
      onLoading?.();
      onLoading = undefined;
      await this.unload(manifest.name); // a new version of the model
      entry = undefined;
    }
    let loadMs = 0;
    let phases: LoadPhases | undefined;
    if (!entry) {
      onLoading?.();
      let loading = this.#loading.get(manifest.name);
      if (!loading) {
        loading = this.#load(manifest).finally(() => this.#loading.delete(manifest.name));
        this.#loading.set(manifest.name, loading);
      }
      entry = await loading;
      loadMs = performance.now() - started;
      phases = entry.phases;
    }
    entry.inUse++;
    entry.lastUsedAt = this.#clock.now();
    this.#disarmIdle(entry);
    return { loaded: entry.loaded, loadMs, ...(phases ? { phases } : {}) };
  }

  /** The batch that acquired `loaded` is over (whether or not the model is still resident). */
  release(loaded: LoadedModel): void {
    const entry = this.#entryOf(loaded);
    if (!entry) return;
    entry.inUse = Math.max(0, entry.inUse - 1);
    entry.lastUsedAt = this.#clock.now();
    this.#armIdle(entry);
  }

  /**
   * Record what a batch of `units` (pixels per job × jobs) measured. Returns
   * the figures to report to the orchestrator: the model's load figure, and the
   * batch's peak only when the batch was the largest since the model loaded —
   * a smaller batch runs in memory its arena already holds, so its peak says
   * nothing about what it needs on its own — or as large as the largest and
   * peaked higher than any batch before (the largest before it was stopped by a
   * cancel, and measured only part of its work).
   */
  recordBatch(loaded: LoadedModel, units: number, memory: BatchMemory | undefined): Pick<BatchMemoryReport, 'residentMB' | 'peakMB'> {
    const entry = this.#entryOf(loaded);
    const report: Pick<BatchMemoryReport, 'residentMB' | 'peakMB'> = { residentMB: loaded.memoryMB };
    if (!memory) return report;
    if (!entry) return { ...report, peakMB: memory.peakMB }; // dropped meanwhile; the figure is still true
    if (units > entry.largestUnits || (units === entry.largestUnits && memory.peakMB > entry.peakMB)) {
      entry.largestUnits = units;
      report.peakMB = memory.peakMB;
    }
    const before = this.#charged(entry);
    entry.heldMB = memory.residentMB;
    entry.peakMB = Math.max(entry.peakMB, memory.peakMB);
    const digest = entry.loaded.manifest.digest;
    this.#measuredMB.set(digest, Math.max(this.#measuredMB.get(digest) ?? 0, entry.peakMB));
    // The device's figure the mesh sees must not wait for the next heartbeat: until then it would place models by
    // what the model held after the batch, not what it took during it.
    if (this.#charged(entry) > before) this.#onCharged();
    return report;
  }

  /** Be told, at once, whenever a model's charge on its device grows (the agent reports its devices then). */
  onChargeGrew(listener: () => void): void {
    this.#onCharged = listener;
  }

  resident(): ResidentModel[] {
    return [...this.#entries.values()].map((entry) => ({
      model: entry.loaded.manifest.name, digest: entry.loaded.manifest.digest, device: entry.loaded.device.id,
      memoryMB: this.#charged(entry), lastUsedAt: entry.lastUsedAt,
    }));
  }

  /** Memory charged on each device. */
  usedMB(deviceId: string): number {
    let used = 0;
    for (const entry of this.#entries.values()) if (entry.loaded.device.id === deviceId) used += this.#charged(entry);
    return used;
  }

  async unload(name: string): Promise<void> {
    const entry = this.#entries.get(name);
    if (!entry) return;
    this.#entries.delete(name);
    this.#disarmIdle(entry);
    await entry.loaded.unload();
    this.#log.info({ model: name, device: entry.loaded.device.id }, 'model unloaded');
    this.#deps.events.unloaded({ model: name, digest: entry.loaded.manifest.digest, device: entry.loaded.device.id });
  }

  /** Unload every model idle for at least `idleMs`, or its own idle window (scale to zero). Returns the names unloaded. */
  async unloadIdle(idleMs: number, now = this.#clock.now()): Promise<string[]> {
    const idle = [...this.#entries.entries()]
      .filter(([, entry]) => entry.inUse === 0 && now - entry.lastUsedAt >= (entry.loaded.idleUnloadMs ?? idleMs))
      .map(([name]) => name);
    for (const name of idle) await this.unload(name);
    return idle;
  }

  async unloadAll(): Promise<void> {
    for (const name of [...this.#entries.keys()]) await this.unload(name);
  }

  /** A model with an idle window of its own is unloaded that long after it became idle, unless a batch comes first. */
  #armIdle(entry: Entry): void {
    const windowMs = entry.loaded.idleUnloadMs;
    if (windowMs === undefined || windowMs === null || entry.inUse > 0) return;
    this.#disarmIdle(entry);
    const name = entry.loaded.manifest.name;
    entry.idleTimer = this.#clock.setTimer(windowMs, () => {
      entry.idleTimer = null;
      if (this.#entries.get(name) !== entry || entry.inUse > 0) return;
      this.#log.info({ model: name, idleMs: windowMs }, 'model idle for its idle window; unloading it');
      this.unload(name).catch((error: unknown) => this.#log.warn({ err: error, model: name }, 'idle unload failed'));
    });
  }

  #disarmIdle(entry: Entry): void {
    entry.idleTimer?.cancel();
    entry.idleTimer = null;
  }

  /** What the model counts against its device's budget (see the class comment). */
  #charged(entry: Entry): number {
    return Math.max(entry.heldMB, entry.peakMB);
  }

  #entryOf(loaded: LoadedModel): Entry | undefined {
    const entry = this.#entries.get(loaded.manifest.name);
    return entry?.loaded === loaded ? entry : undefined;
  }

  /** What a model is expected to take to load: what it measured here before, else its manifest's guess. */
  #needMB(manifest: ModelManifest): number {
    return this.#measuredMB.get(manifest.digest) ?? manifest.memoryMB;
  }

  async #load(manifest: ModelManifest): Promise<Entry> {
    const engine = this.#deps.engines.get(manifest.engine);
    if (!engine) throw new EngineError('ENGINE_FAILED', `this host has no "${manifest.engine}" engine`, true);
    const wait = this.#restarts.waitMs(manifest.name, this.#clock.now());
    if (wait > 0) {
      this.#log.warn({ model: manifest.name, waitMs: wait }, 'its engine keeps crashing; waiting before starting it again');
      await sleep(this.#clock, wait, NEVER_ABORTED);
    }
    const placing = performance.now();
    const { device, release } = await this.#placeFor(manifest);
    const timing = { evictMs: performance.now() - placing, pullMs: 0, engineMs: 0 };
    let loaded: LoadedModel;
    try {
      loaded = await this.#loadVerified(engine, manifest, device, timing);
    } catch (error) {
      // An engine that dies while loading counts as a crash too, so a model that kills it on every load is paced.
      if (error instanceof EngineError && error.code === 'ENGINE_CRASHED') this.#restarts.crashed(manifest.name, this.#clock.now(), 0);
      throw error;
    } finally {
      release(); // loaded, the model is charged as an entry; failed, it takes nothing
    }
    const now = this.#clock.now();
    // Booked at its working peak from the start when its batches here showed one before (it will run them again).
    const knownPeakMB = this.#measuredMB.get(manifest.digest) ?? 0;
    const entry: Entry = {
      loaded, sent: manifest, loadedAt: now, phases: loadPhases(timing, loaded), heldMB: loaded.memoryMB, peakMB: Math.max(loaded.memoryMB, knownPeakMB),
      largestUnits: 0, inUse: 0, lastUsedAt: now, idleTimer: null,
    };
    this.#entries.set(manifest.name, entry);
    this.#armIdle(entry); // loaded for no batch yet (or its batch gave up): idle from now
    this.#measuredMB.set(manifest.digest, Math.max(knownPeakMB, loaded.memoryMB));
    void loaded.exited.then((reason) => this.#exited(entry, reason));
    this.#log.info({ model: manifest.name, device: device.id, memoryMB: loaded.memoryMB, declaredMB: manifest.memoryMB, ...(loaded.accelerator ? { accelerator: loaded.accelerator } : {}) }, 'model loaded');
    this.#deps.events.loaded({ model: manifest.name, digest: manifest.digest, device: device.id, memoryMB: loaded.memoryMB, lastUsedAt: entry.lastUsedAt }, loaded);
    if (entry.peakMB > loaded.memoryMB) this.#onCharged();
    return entry;
  }

  /**
   * Load from the cache; if the engine finds the bytes it read do not match the
   * digest (the file changed after the cache checked it), the cached copy is
   * deleted, pulled again (verified) and loaded once more.
   */
  async #loadVerified(engine: Engine, sent: ModelManifest, device: Device, timing: LoadTiming): Promise<LoadedModel> {
    // The model as this host runs it: the host settings the orchestrator sent give way to the host's own.
    const manifest = (this.#deps.hostConfig ?? NO_HOST_CONFIG).apply(sent);
    const timed = async <T>(phase: 'pullMs' | 'engineMs', step: () => Promise<T>): Promise<T> => {
      const start = performance.now();
      try {
        return await step();
      } finally {
        timing[phase] += performance.now() - start;
      }
    };
    if (manifest.file === false) return timed('engineMs', () => engine.load(manifest, null, device)); // nothing to pull: the engine's server has its own weights
    const pull = (): Promise<{ path: string; files?: Record<string, string> }> => timed('pullMs', () => this.#pull(manifest));
    const { path, files } = await pull();
    try {
      return await timed('engineMs', () => engine.load(manifest, path, device, files));
    } catch (error) {
      if (!(error instanceof EngineError && error.code === 'INTEGRITY_FAILED')) throw error;
      this.#log.warn({ model: manifest.name, err: error }, 'the model file failed verification at load; pulling it again');
      // Which file failed the engine says in words only: every file of the model is checked again (the good ones
      // cost a hash, not a pull).
      for (const digest of [manifest.digest, ...Object.values(manifest.files ?? {}).map((member) => member.digest)]) {
        await this.#deps.cache.invalidate(digest, error.message);
      }
      const again = await pull();
      return timed('engineMs', () => engine.load(manifest, again.path, device, again.files));
    }
  }

  /**
   * A model's files on this host, checked: its one file, or for a model of several files every member (by name, in a
   * folder of the model's own) and then its index, so a host that reports the index cached has the whole model.
   */
  async #pull(manifest: ModelManifest): Promise<{ path: string; files?: Record<string, string> }> {
    const { cache } = this.#deps;
    if (!manifest.files) return { path: await cache.path(manifest.digest) };
    const members = Object.entries(manifest.files);
    const paths = await Promise.all(members.map(([, member]) => cache.path(member.digest)));
    // Each member under its own name, in a folder of the model's alone: a member may name another (external data).
    const files = await cache.namedSet(manifest.digest, Object.fromEntries(members.map(([name], index) => [name, paths[index]!])));
    return { path: await cache.path(manifest.digest), files };
  }

  /** The engine process holding a model died: forget the model now, so the next batch starts a fresh one. */
  #exited(entry: Entry, reason: string): void {
    const { manifest, device } = entry.loaded;
    if (this.#entries.get(manifest.name) !== entry) return; // already unloaded or replaced
    this.#entries.delete(manifest.name);
    this.#disarmIdle(entry);
    const now = this.#clock.now();
    const restartInMs = this.#restarts.crashed(manifest.name, now, now - entry.loadedAt);
    this.#log.warn({ model: manifest.name, device: device.id, reason, upMs: now - entry.loadedAt, restartInMs }, 'engine process died; model dropped');
    this.#deps.events.unloaded({ model: manifest.name, digest: manifest.digest, device: device.id });
    // Let the engine tidy up what it kept for the model; its process is already gone.
    entry.loaded.unload().catch((error: unknown) => this.#log.debug({ err: error }, 'unload after a crash failed'));
  }

  /**
   * The device to load on, after evicting idle models there if needed, with the model's memory set aside there
   * until `release` (called when the load ends).
   */
  async #placeFor(manifest: ModelManifest): Promise<{ device: Device; release: () => void }> {
    const need = this.#needMB(manifest);
    const devices = this.#deps.devices();
    const largest = Math.max(0, ...devices.map((device) => device.budgetMB));
    if (need > largest) {
      throw new EngineError('MODEL_TOO_LARGE', `model "${manifest.name}" needs ${need} MB, more than the largest budget (${largest} MB)`, true);
    }
    const free = (device: Device): number => device.budgetMB - this.usedMB(device.id) - (this.#reservedMB.get(device.id) ?? 0);
    // Set aside at once (before any await), so a load asked for meanwhile sees the room as taken.
    const reserve = (device: Device): { device: Device; release: () => void } => {
      this.#reservedMB.set(device.id, (this.#reservedMB.get(device.id) ?? 0) + need);
      let released = false;
      return {
        device,
        release: () => {
          if (released) return;
          released = true;
          this.#reservedMB.set(device.id, Math.max(0, (this.#reservedMB.get(device.id) ?? 0) - need));
        },
      };
    };
    const byRoom = [...devices].sort((a, b) => free(b) - free(a));
    const roomy = byRoom.find((device) => free(device) >= need);
    if (roomy) return reserve(roomy);
    for (const device of byRoom) {
      const evictable = [...this.#entries.values()]
        .filter((entry) => entry.loaded.device.id === device.id && entry.inUse === 0)
        .sort((a, b) => a.lastUsedAt - b.lastUsedAt);
      const reclaimable = evictable.reduce((sum, entry) => sum + this.#charged(entry), 0);
      if (free(device) + reclaimable < need) continue;
      const placed = reserve(device);
      for (const entry of evictable) {
        if (free(device) + need >= need) break; // room for it beside what is set aside (its own share included)
        this.#log.info({ evict: entry.loaded.manifest.name, for: manifest.name, device: device.id }, 'evicting least recently used model');
        await this.unload(entry.loaded.manifest.name);
      }
      return placed;
    }
    throw new EngineError('NO_ROOM', `no device has room for "${manifest.name}" (${need} MB) while the models there are busy or held, or loading`, true);
  }
}

interface LoadTiming {
  evictMs: number;
  pullMs: number;
  /** The engine's whole `load`: its process's startup (when it started one) and the model's own load. */
  engineMs: number;
}

/** A load's phases: the engine's time split into its process's startup (if it started one) and the model's init. */
function loadPhases(timing: LoadTiming, loaded: LoadedModel): LoadPhases {
  const startup = loaded.startup;
  const initMs = Math.max(0, timing.engineMs - (startup ? startup.spawnMs + startup.readyMs : 0));
  const round = (ms: number): number => Math.round(ms * 10) / 10;
  return {
    pullMs: round(timing.pullMs), evictMs: round(timing.evictMs),
    ...(startup ? { spawnMs: round(startup.spawnMs), readyMs: round(startup.readyMs) } : {}),
    initMs: round(initMs),
  };
}

/**
 * Whether two manifests are the same version of a model: the same file (or definition) and the same settings.
 * A model declared in mesh.yaml keeps its file's digest when only its settings change (a new command, a new
 * limit), and the server must start again with them.
 */
function sameVersion(a: ModelManifest, b: ModelManifest): boolean {
  return a.digest === b.digest && a.version === b.version && JSON.stringify(a.settings ?? {}) === JSON.stringify(b.settings ?? {});
}
