import type { Logger } from 'pino';
import type { HostAway } from '../../protocol/index.js';
import { every, type Clock } from '../../protocol/clock.js';
import type { HostPolicies } from './config.js';
import type { GpuSample } from './gpu-telemetry.js';
import { EnergyMeter } from './energy.js';
import { Hours } from './hours.js';

export interface HostAvailabilityDeps {
  policies: HostPolicies;
  clock: Clock;
  log: Logger;
  /** The GPUs now (nvidia-smi), or null on a host without them. */
  sample(): Promise<GpuSample | null>;
  /** The processes of the agent and its engines: a GPU's other processes are the owner's. */
  ownPids(): ReadonlySet<number>;
  /** What the agent's models hold on a device by its own booking (MB), for a driver that lists no process memory. */
  ownUsedMB(device: string): number;
  /** Run the owner's activity command: true when it exits 0 ("I am using this machine"). */
  ownerActive(command: string | readonly string[]): Promise<boolean>;
  /** Whether the host takes work changed (sent to the orchestrator at once). */
  changed(away: HostAway | null): void;
  /** After every check, changed or not: what the state asks of the host now (hand work back, unload). */
  checked(away: HostAway | null): void;
}

/** How often GPUs are read when no policy says (for the mesh view's temperature and power). */
const SAMPLE_EVERY_MS = 5000;
const GB = 1024;

const size = (mb: number): string => (mb >= GB ? `${(mb / GB).toFixed(1)} GB` : `${Math.round(mb)} MB`);

/**
 * Whether this host takes work now, by its owner's policies (host-policy/config.ts), checked every few seconds:
 * - **owner** — other programs hold more than `gpuMemoryMB` on a GPU (memory beyond what the agent's engines hold), or
 *   the owner's activity command says the machine is in use: `yielded`, until the owner has been gone `quietS`;
 * - **hours** — outside its windows: `off-hours` until the next one opens;
 * - **cool** — every GPU at or over its temperature or power limit: `hot`, until one is `margin` below it.
 * The first that holds is the reason (owner, then hours, then heat). It also keeps the GPUs' last readings, which the
 * heartbeat carries (temperature and power for the mesh view).
 */
export class HostAvailability {
  readonly #deps: HostAvailabilityDeps;
  readonly #hours: Hours | null;
  #away: HostAway | null = null;
  #ownerSeenAt: number | null = null;
  #ownerReason = '';
  #hot = new Set<string>();
  #sample: GpuSample | null = null;
  /** The GPUs' energy, from each reading's power (energy per result). */
  readonly energy = new EnergyMeter();
  #lastActivityCheck = -Infinity;
  #activeByCommand = false;
  #stop: (() => void) | null = null;
  #checking: Promise<void> | null = null;

  constructor(deps: HostAvailabilityDeps) {
    this.#deps = deps;
    const { hours } = deps.policies;
    this.#hours = hours ? new Hours(hours.available, hours.timeZone) : null;
  }

  /** Away and why, or null when the host takes work. */
  get away(): HostAway | null {
    return this.#away;
  }

  /** The GPUs' readings last taken (null: none, or no GPU). */
  get sample(): GpuSample | null {
    return this.#sample;
  }

  /** Check now, then every few seconds (the owner policy's `checkEveryS` when it is shorter). */
  async start(): Promise<void> {
    await this.check();
    const ownerEveryMs = (this.#deps.policies.owner?.checkEveryS ?? Infinity) * 1000;
    this.#stop = every(this.#deps.clock, Math.min(SAMPLE_EVERY_MS, ownerEveryMs), () => void this.check());
  }

  stop(): void {
    this.#stop?.();
    this.#stop = null;
  }

  /** Read the machine and decide; one check at a time (a slow nvidia-smi never piles up). */
  check(): Promise<void> {
    this.#checking ??= this.#check().catch((error: unknown) => this.#deps.log.warn({ err: error }, 'host policy check failed')).finally(() => {
      this.#checking = null;
    });
    return this.#checking;
  }

  async #check(): Promise<void> {
    const { clock, policies } = this.#deps;
    this.#sample = await this.#deps.sample();
    if (this.#sample) this.energy.record(this.#sample);
    const now = clock.now();
    const owner = await this.#owner(now);
    if (owner) {
      this.#ownerSeenAt = now;
      this.#ownerReason = owner;
    }
    this.#set(this.#decide(now, owner, (policies.owner?.quietS ?? 0) * 1000), now);
    this.#deps.checked(this.#away);
  }

  /** Away and why now (owner, then hours, then heat), or null. */
  #decide(now: number, owner: string | null, quietMs: number): Omit<HostAway, 'since'> | null {
    if (owner) return { state: 'yielded', reason: owner, until: null };
    if (this.#ownerSeenAt !== null && now - this.#ownerSeenAt < quietMs) {
      return { state: 'yielded', reason: `${this.#ownerReason}; back after ${Math.round(quietMs / 1000)} s without it`, until: null };
    }
    if (this.#hours && !this.#hours.isOpen(now)) {
      const until = this.#hours.nextChange(now);
      return { state: 'off-hours', reason: `out of hours${until === null ? '' : ` until ${this.#hours.describe(until)}`} (${this.#hours.timeZone})`, until };
    }
    const heat = this.#heat();
    return heat ? { state: 'hot', reason: heat, until: null } : null;
  }

  #set(next: Omit<HostAway, 'since'> | null, now: number): void {
    const before = this.#away;
    if (next === null) {
      if (before === null) return;
      this.#away = null;
    } else {
      if (before?.state === next.state && before.reason === next.reason && before.until === next.until) return;
      this.#away = { ...next, since: before?.state === next.state ? before.since : now };
    }
    if (this.#away) this.#deps.log.info({ state: this.#away.state, reason: this.#away.reason }, 'this host takes no work now');
    else this.#deps.log.info({ was: before?.state }, 'this host takes work again');
    this.#deps.changed(this.#away);
  }

  /** Why the owner is using the machine now, in words (`game.exe holds 6.2 GB on gpu0`), or null. */
  async #owner(now: number): Promise<string | null> {
    const owner = this.#deps.policies.owner;
    if (!owner) return null;
    if (owner.gpuMemoryMB !== undefined && this.#sample) {
      const own = this.#deps.ownPids();
      for (const gpu of this.#sample.gpus) {
        const processes = this.#sample.processes.filter((process) => process.device === gpu.id);
        const listed = processes.filter((process) => own.has(process.pid) && process.usedMB !== null);
        // What our engines hold: the driver's per-process figures where it gives them, else our own booking.
        const ownMB = listed.length > 0 ? listed.reduce((sum, process) => sum + process.usedMB!, 0) : this.#deps.ownUsedMB(gpu.id);
        const othersMB = (gpu.usedMB ?? 0) - ownMB;
        if (othersMB <= owner.gpuMemoryMB) continue;
        const largest = processes.filter((process) => !own.has(process.pid)).sort((a, b) => (b.usedMB ?? 0) - (a.usedMB ?? 0))[0];
        return largest?.usedMB ? `${largest.name} holds ${size(largest.usedMB)} on ${gpu.id}` : `other programs hold ${size(othersMB)} on ${gpu.id}`;
      }
    }
    if (owner.activityCommand !== undefined) {
      // The command runs at its own pace (checkEveryS); between runs its last answer stands.
      if (now - this.#lastActivityCheck >= owner.checkEveryS * 1000) {
        this.#lastActivityCheck = now;
        this.#activeByCommand = await this.#deps.ownerActive(owner.activityCommand);
      }
      if (this.#activeByCommand) return 'its owner is using it (owner.activityCommand)';
    }
    return null;
  }

  /** Why every GPU is too hot to take work, or null: one under its limits (by the margin, once it was over) takes it. */
  #heat(): string | null {
    const cool = this.#deps.policies.cool;
    if (!cool || !this.#sample) return null;
    const reasons: string[] = [];
    for (const gpu of this.#sample.gpus) {
      const wasHot = this.#hot.has(gpu.id);
      const over: string[] = [];
      if (cool.temperatureC !== undefined && gpu.temperatureC !== null && gpu.temperatureC >= cool.temperatureC - (wasHot ? cool.marginC : 0)) {
        over.push(`${gpu.temperatureC} °C (limit ${cool.temperatureC})`);
      }
      if (cool.powerW !== undefined && gpu.powerW !== null && gpu.powerW >= cool.powerW - (wasHot ? cool.marginW : 0)) {
        over.push(`${Math.round(gpu.powerW)} W (limit ${cool.powerW})`);
      }
      if (over.length > 0) {
        this.#hot.add(gpu.id);
        reasons.push(`${gpu.id} at ${over.join(', ')}`);
      } else this.#hot.delete(gpu.id);
    }
    return reasons.length > 0 && reasons.length === this.#sample.gpus.length ? reasons.join('; ') : null;
  }
}
