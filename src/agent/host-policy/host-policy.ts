import type { Logger } from 'pino';
import type { Device, HostAway } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { EngineError } from '../core/engine.js';
import { ownerActive, runOwnerCommand } from './activity.js';
import { HostAvailability } from './availability.js';
import type { HostPolicies } from './config.js';
import { sampleGpus, type GpuReading } from './gpu-telemetry.js';
import { Sleeper } from './sleeper.js';
import { Yielding, type YieldingDeps } from './yielding.js';

export interface HostPolicyDeps {
  host: string;
  /** The owner's policies from the host's config (`wake` is the orchestrator's to act on, not the agent's). */
  policies: Omit<HostPolicies, 'wake'>;
  devices: readonly Device[];
  /** Where nvidia-smi is (read only on a host with GPUs or policies). */
  nvidiaSmi: string;
  clock: Clock;
  log: Logger;
  batches: YieldingDeps['batches'];
  residency: YieldingDeps['residency'] & { usedMB(device: string): number };
  /** The processes of the agent and its engines: a GPU's other processes are the owner's. */
  ownPids(): ReadonlySet<number>;
  /** Whether the host has nothing to do now (the sleep policy's idleness). */
  idle(): boolean;
  /** What the mesh knows of the host changed (away, asleep): it hears now, not at the next heartbeat. */
  changed(): void;
  /** Going to sleep, after the mesh heard so: let the models go and close the link. */
  sleep(): Promise<void>;
  /** The sleep command ended: link again. */
  wake(): void;
}

/**
 * The owner's say over this host, wired together: whether it takes work (owner, hours, heat: HostAvailability), what
 * it does about the work it holds when it takes none (Yielding), and when it sleeps (Sleeper). The agent asks it why
 * the host is away, for the GPUs' readings and energy, and what a batch sent meanwhile fails with.
 */
export class HostPolicy {
  /** Null on a host with neither GPUs nor policies: it reads nothing and is never away. */
  readonly #availability: HostAvailability | null;
  readonly #yielding: Yielding;
  readonly #sleeper: Sleeper | null;
  /** What the host says while it goes to sleep and sleeps. */
  #asleep: HostAway | null = null;

  constructor(deps: HostPolicyDeps) {
    const { policies, clock } = deps;
    const log = deps.log.child({ part: 'policy' });
    this.#sleeper = policies.sleep ? new Sleeper({
      policy: policies.sleep, clock, log, idle: deps.idle,
      fallAsleep: async (away) => {
        this.#asleep = away;
        deps.changed();
        await deps.sleep();
      },
      runCommand: async (command) => {
        if (!(await runOwnerCommand(command))) throw new Error(`sleep.command ${JSON.stringify(command)} failed`);
      },
      wake: () => {
        this.#asleep = null;
        deps.wake();
      },
    }) : null;
    this.#yielding = new Yielding({ host: deps.host, owner: policies.owner, clock, log, batches: deps.batches, residency: deps.residency });
    // Read the GPUs only where there are GPUs or policies: a CPU host without policies runs nothing more.
    this.#availability = Object.keys(policies).length > 0 || deps.devices.some((device) => device.kind === 'gpu') ? new HostAvailability({
      policies, clock, log,
      sample: () => sampleGpus(deps.nvidiaSmi, clock.now()),
      ownPids: deps.ownPids,
      ownUsedMB: (device) => deps.residency.usedMB(device),
      ownerActive,
      changed: () => deps.changed(),
      checked: (away) => {
        this.#yielding.enforce(away);
        this.#sleeper?.check();
      },
    }) : null;
  }

  /** Why the host takes no work now: going to sleep, else its owner, hours or heat; null when it takes work. */
  get away(): HostAway | null {
    return this.#asleep ?? this.#availability?.away ?? null;
  }

  /** Whether it reads anything (GPUs or policies): the hello then says whether the host takes work. */
  get watching(): boolean {
    return this.#availability !== null;
  }

  /** The first look (before the hello, so it says whether the host takes work), then one every few seconds. */
  start(): Promise<void> {
    return this.#availability?.start() ?? Promise.resolve();
  }

  stop(): void {
    this.#availability?.stop();
  }

  /** A GPU's last reading (temperature, power), if it was read. */
  reading(device: string): GpuReading | undefined {
    return this.#availability?.sample?.gpus.find((gpu) => gpu.id === device);
  }

  /** The energy a device has drawn by `at` (J), from its readings' power; null where it reports none. */
  energyJ(device: string, at: number): number | null {
    return this.#availability?.energy.joulesAt(device, at) ?? null;
  }

  /** What a job sent while the host is away fails with: HOST_AWAY, retryable, naming why. */
  refusal(away: HostAway): EngineError {
    return this.#yielding.refusal(away);
  }
}
