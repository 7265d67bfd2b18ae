import {
  familyOf, type CatalogueIndex, type Device, type HostAway, type NodeCatalogue, type OrchestratorMessage, type ResidentModel, type ToolReport, type UnavailableClass,
} from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';

/** A batch a host is running: which jobs, on which model, since when. */
export interface InFlightBatch {
  id: string;
  model: string;
  jobIds: Set<string>;
  dispatchedAt: number;
  /** The engine is done with it and its outputs are on their way (the agent said `computed`): it holds no slot. */
  computed?: boolean;
}

export interface HostInfo {
  id: string;
  classes: string[];
  devices: Device[];
  engines: string[];
  concurrency: number;
  version: string;
  /** The models the host's grant allows it (its `models` caveat): it is sent no other, nor may report one. Absent or null: any. */
  models?: readonly string[] | null;
  /** Classes it was configured to serve and cannot (`video` without ffmpeg), with why; absent: none. */
  unavailable?: readonly UnavailableClass[];
  /** The programs it found for its work (ffmpeg), as its hello said. */
  tools?: readonly ToolReport[];
  /** Who its engine processes run as, as its hello said (absent: an agent too old to say). */
  engineUser?: string;
  /** Its platform and how it governs its engines, as its hello said (absent: an agent too old to say). */
  platform?: string;
  governance?: string;
  /** The models its own config declares (commands, servers: only there may they run); absent: an agent too old to say. */
  configured?: readonly string[];
  /** Its network interfaces' MAC addresses, where its owner let it say (Wake-on-LAN); absent: none said. */
  macs?: readonly string[];
  /** The models whose ComfyUI its owner opened to clients (the pass-through), as its hello said; absent: none. */
  passthrough?: readonly string[];
}

/** Why `info`'s host cannot serve one of `classes` although it was meant to (the first such class), or null. */
export function unavailableFor(info: HostInfo, classes: readonly string[]): UnavailableClass | null {
  if (!info.unavailable) return null;
  for (const entry of info.unavailable) if (classes.includes(entry.class)) return entry;
  return null;
}

/**
 * One connected agent as the orchestrator sees it: what it said in its hello,
 * what its heartbeats report, the batches it runs, and the way to send it a
 * message. The link layer feeds it; the router reads it; the dispatcher
 * records batches on it.
 */
export class HostSession {
  readonly info: HostInfo;
  readonly session: string;
  readonly connectedAt: number;
  lastSeenAt: number;
  /** Model digests in the agent's local file cache (loading one of these needs no pull). */
  readonly cached: Set<string>;
  readonly batches: Map<string, InFlightBatch> = new WatchedMap(() => this.#changed());
  /** Health probes running here: batch id → when it was sent; each takes a slot like a batch. */
  readonly probes: Map<string, number> = new WatchedMap(() => this.#changed());
  /** Finishing its work and taking no more (set by whoever drains hosts); the router passes it over. */
  draining = false;
  /**
   * Replica changes the autoscaler asked this host for and has not seen happen yet, by model name: a model being
   * loaded is a replica already (no other host is asked for it, and batches may go there and wait for the load);
   * one being unloaded neither counts nor takes batches.
   */
  readonly replicaChanges: Map<string, { change: 'load' | 'unload'; at: number }> = new WatchedMap(() => this.#changed());
  /** Models this host was asked to hold for their minReplicas (`load` with `hold`). */
  readonly held = new Set<string>();
  /**
   * The models whose clients' workflows this host's owner lets it run (ComfyUI's `acceptWorkflows`), by name, each
   * with what its server offers (`/object_info`, indexed) or null while that is not known. A model absent here: the
   * host takes no workflows for it (routing/workflow-fit.ts).
   */
  readonly catalogues = new Map<string, HostCatalogue | null>();
  #resident: ResidentModel[] = [];
  #devices: Device[] = [];
  #reports = 0;
  #largestBudgetMB = 0;
  #away: HostAway | null = null;
  #onChange: ((host: HostSession) => void) | null = null;
  readonly #send: (message: OrchestratorMessage) => void;
  readonly #ackLater: AckDelay | null;
  #acks: string[] = [];
  #ackTimer: Timer | null = null;

  /**
   * `ackDelay`: acknowledgements wait up to this long and ride along with the next message to the host — the next
   * batch, usually — instead of waking the agent once for each (null: they leave at the end of the tick).
   */
  constructor(info: HostInfo, cached: readonly string[], session: string, now: number, send: (message: OrchestratorMessage) => void, ackDelay: AckDelay | null = null) {
    this.info = info;
    this.cached = new Set(cached);
    this.session = session;
    this.connectedAt = now;
    this.lastSeenAt = now;
    this.devices = info.devices;
    this.#send = send;
    this.#ackLater = ackDelay;
  }

  get id(): string {
    return this.info.id;
  }

  /** The models loaded here, as the agent last reported them. */
  get resident(): readonly ResidentModel[] {
    return this.#resident;
  }

  set resident(models: readonly ResidentModel[]) {
    this.#resident = [...models];
    this.#changed();
  }

  /** Neither draining nor away: work may go here (slots aside). */
  get takesWork(): boolean {
    return !this.draining && this.#away === null;
  }

  /** Linked and taking no work now, and why (its owner, its hours, its heat: its agent says); null when it takes work. */
  get away(): HostAway | null {
    return this.#away;
  }

  set away(away: HostAway | null) {
    this.#away = away;
  }

  get devices(): readonly Device[] {
    return this.#devices;
  }

  /** How many reports of its devices came, the hello's included: a change's figure is in the first one after it. */
  get reports(): number {
    return this.#reports;
  }

  set devices(devices: readonly Device[]) {
    this.#reports++;
    this.#devices = [...devices];
    // Read by the router for every host it considers: computed once per report, not per decision.
    this.#largestBudgetMB = Math.max(0, ...devices.map((device) => device.budgetMB));
  }

  /**
   * Tell `listener` whenever what routing indexes changes — the resident models, a slot taken or freed, a replica
   * change asked for — so the host registry keeps its indexes with it. Null stops it.
   */
  watch(listener: ((host: HostSession) => void) | null): void {
    this.#onChange = listener;
  }

  #changed(): void {
    this.#onChange?.(this);
  }

  /** The models this host holds a replica of (see hasReplica). */
  replicaModels(): Set<string> {
    const models = new Set<string>();
    for (const entry of this.#resident) models.add(entry.model);
    for (const batch of this.batches.values()) models.add(batch.model);
    for (const [model, change] of this.replicaChanges) {
      if (change.change === 'load') models.add(model);
      else models.delete(model);
    }
    return models;
  }

  /**
   * Slots are for computing: a batch whose outputs are still on their way (`computed`) holds none, so the next batch's
   * inputs travel while the last one's outputs do, and the engine does not wait for both.
   */
  get freeSlots(): number {
    return Math.max(0, this.info.concurrency - this.computing - this.probes.size);
  }

  /** Batches the engine has not finished (sent, loading, running); those delivering their outputs are not counted. */
  get computing(): number {
    let count = 0;
    for (const batch of this.batches.values()) if (!batch.computed) count++;
    return count;
  }

  /** The agent's engine is done with a batch it holds: its slot is free. False when it holds no such batch (or said so already). */
  batchComputed(batchId: string): boolean {
    const batch = this.batches.get(batchId);
    if (!batch || batch.computed) return false;
    batch.computed = true;
    this.#changed();
    return true;
  }

  get jobsInFlight(): number {
    let count = 0;
    for (const batch of this.batches.values()) count += batch.jobIds.size;
    return count;
  }

  /** Whether the host's grant allows it this model: what it is sent, runs and reports. */
  mayServe(model: string): boolean {
    return !this.info.models || this.info.models.includes(familyOf(model));
  }

  isResident(model: string): boolean {
    for (const entry of this.#resident) if (entry.model === model) return true;
    return false;
  }

  /** A loaded replica: the model is resident here and not being unloaded. */
  hasReadyReplica(model: string): boolean {
    return this.isResident(model) && this.replicaChanges.get(model)?.change !== 'unload';
  }

  /** A replica as the autoscaler counts them: ready, being loaded, or running the model (a load on demand); not being unloaded. */
  hasReplica(model: string): boolean {
    const change = this.replicaChanges.get(model)?.change;
    if (change !== undefined) return change === 'load';
    if (this.isResident(model)) return true;
    for (const batch of this.batches.values()) if (batch.model === model) return true;
    return false;
  }

  /** The largest memory budget of any device: a model bigger than this can never load here. */
  get largestBudgetMB(): number {
    return this.#largestBudgetMB;
  }

  /** The agent loaded a model: it is resident, and its file is in the agent's cache. */
  loaded(model: ResidentModel): void {
    this.resident = [...this.#resident.filter((entry) => entry.model !== model.model), model];
    this.cached.add(model.digest);
  }

  unloaded(model: string): void {
    if (this.isResident(model)) this.resident = this.#resident.filter((entry) => entry.model !== model);
  }

  send(message: OrchestratorMessage): void {
    this.#flushAcks();
    this.#send(message);
  }

  /** Acknowledge a result; acknowledgements travel together (see the constructor's `ackDelay`). */
  ack(jobId: string): void {
    if (this.#acks.length === 0) {
      // The timer is left armed when the acknowledgements ride along with a message: one that fires with none waiting
      // does nothing, and one timer every few milliseconds is cheaper than setting and clearing one for every result.
      if (!this.#ackLater) queueMicrotask(() => this.#flushAcks());
      else this.#ackTimer ??= this.#ackLater.clock.setTimer(this.#ackLater.ms, () => {
        this.#ackTimer = null;
        this.#flushAcks();
      });
    }
    this.#acks.push(jobId);
  }

  #flushAcks(): void {
    if (this.#acks.length === 0) return;
    const jobIds = this.#acks;
    this.#acks = [];
    this.#send({ type: 'ack', jobIds });
  }
}

/** What a host's ComfyUI offers a model's workflows: as it reported it, and indexed for checks. */
export interface HostCatalogue {
  nodes: NodeCatalogue;
  index: CatalogueIndex;
}

export interface AckDelay {
  clock: Pick<Clock, 'setTimer'>;
  ms: number;
}

/**
 * A Map that says when it changed, so a host's batches, probes and replica changes can be set and deleted where they
 * are today (the in-flight table, failover, the prober, the autoscaler) while the host registry's indexes stay right.
 */
class WatchedMap<K, V> extends Map<K, V> {
  readonly #changed: () => void;

  constructor(changed: () => void) {
    super();
    this.#changed = changed;
  }

  override set(key: K, value: V): this {
    super.set(key, value);
    // Also when the key was there: a replica change from `load` to `unload` changes what the host is indexed under.
    this.#changed();
    return this;
  }

  override delete(key: K): boolean {
    const deleted = super.delete(key);
    if (deleted) this.#changed();
    return deleted;
  }

  override clear(): void {
    const had = this.size > 0;
    super.clear();
    if (had) this.#changed();
  }
}
