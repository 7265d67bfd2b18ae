import { chownSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { CgroupDriver } from './cgroups/driver.js';
import { safeName } from './cgroups/cgroupfs.js';
import { detectCgroups, type DetectOptions } from './cgroups/detect.js';
import { every, systemClock, type Clock } from '../../protocol/clock.js';
import type { ContainerDriver, GovernanceKind } from './contract/containment.js';
import { GovernedProcess, type SpawnSpec } from './governed-process.js';
import { groupRssMB } from './process-memory.js';
import { ProcessRecords } from './process-records.js';
import { handOver, type EngineUser } from './engine-user.js';
import { GovernanceConfig, type GovernanceConfigInput } from '../../protocol/engines/process-settings.js';

export interface GovernorOptions {
  /** This agent's id (its host id); with the agent's pid it names the agent's parent cgroup. */
  agentId: string;
  config?: GovernanceConfigInput;
  log: Logger;
  clock?: Clock;
  /** Where detection reads the mounts and the process's cgroups (tests). */
  files?: DetectOptions['files'];
  /**
   * The folder engine processes get their working directories in (each its own, empty, removed when it ends).
   * Default: `gpumesh-engines` in the OS temp folder.
   */
  workRoot?: string;
  /** Who engine processes run as (resolveEngineUser). Default: the agent's own user. */
  engineUser?: EngineUser;
}

const AGENT_USER: EngineUser = { identity: null, description: 'the agent\'s user', unprivileged: true };

/** How often portable governance reads each limited tree's memory (where no system enforces the limit). */
const MEMORY_POLL_MS = 500;

/** The platforms' names as people call them (`windows · job objects`), from Node's. */
const PLATFORM_NAMES: Readonly<Record<string, string>> = { linux: 'linux', win32: 'windows', darwin: 'macos' };
export const platformName = (platform: string = process.platform): string => PLATFORM_NAMES[platform] ?? platform;

/** How the Governor governs on this host: the driver of its containers (if any), its kind, and why it is not better. */
interface Choice {
  driver: ContainerDriver | null;
  kind: GovernanceKind;
  /** Why there are no containers (null when there are). */
  unavailable: string | null;
}

/**
 * The agent's authority over its engine processes, one contract on every platform (contract/containment.ts): at start
 * it chooses how to govern — cgroups (v2, else v1) or process groups on Linux, Job Objects on Windows, portable process
 * groups with a lifeline elsewhere or when asked (`mode: portable`) — and says which, or why not better, in one log
 * line; it starts every engine process governed; where no system enforces a memory limit (portable) it reads each
 * limited tree's memory and stops one over its limit (ENGINE_OOM); on close it ends what still runs and lets its
 * containers go.
 */
export class Governor {
  readonly config: GovernanceConfig;
  readonly clock: Clock;
  readonly #driver: ContainerDriver | null;
  readonly #log: Logger;
  readonly #live = new Set<GovernedProcess>();
  /** Why there are no containers (null when there are). */
  readonly cgroupsUnavailable: string | null;
  /** How this agent governs its engines (`cgroup v2`, `job objects`, `portable`, …). */
  readonly kind: GovernanceKind;
  /** Who engine processes run as. */
  readonly engineUser: EngineUser;
  readonly #workRoot: string;
  /** Every engine process this agent started, recorded for the next agent of the folder should this one die first. */
  readonly #records: ProcessRecords;
  #stopWatch: (() => void) | null = null;

  private constructor(config: GovernanceConfig, choice: Choice, log: Logger, clock: Clock, rooms: { workRoot?: string; engineUser?: EngineUser }) {
    this.config = config;
    this.#driver = choice.driver;
    this.kind = choice.kind;
    this.cgroupsUnavailable = choice.unavailable;
    this.#log = log;
    this.clock = clock;
    this.engineUser = rooms.engineUser ?? AGENT_USER;
    this.#workRoot = rooms.workRoot ?? join(tmpdir(), 'gpumesh-engines');
    this.#records = new ProcessRecords(join(this.#workRoot, '.records'));
  }

  static async create(options: GovernorOptions): Promise<Governor> {
    const config = GovernanceConfig.parse(options.config ?? {});
    const choice = await choose(config, options);
    if (choice.driver) options.log.info({ governance: choice.kind, platform: platformName() }, `process governance: ${choice.driver.description}`);
    else if (choice.kind === 'portable') {
      options.log.info({ governance: choice.kind, platform: platformName() }, `process governance: portable (process groups with a lifeline, memory read every ${MEMORY_POLL_MS} ms)${choice.unavailable ? `: ${choice.unavailable}` : ''}`);
    } else {
      options.log.warn({ governance: choice.kind, cgroups: null }, `process governance without cgroups: ${choice.unavailable}. ` +
        'Engine processes run in their own process groups, without memory, pids or CPU limits and without OOM reports');
    }
    const governor = new Governor(config, choice, options.log, options.clock ?? systemClock, options);
    // Before the agent links: what a crashed agent of this folder left behind must not hold the ports and memory its
    // successor's engines need.
    governor.#records.reap(options.log);
    return governor;
  }

  /** Process groups only, no detection and no log line (tests, and callers that govern nothing else). */
  static withoutCgroups(log: Logger, clock: Clock = systemClock, rooms: { workRoot?: string; engineUser?: EngineUser } = {}): Governor {
    return new Governor(GovernanceConfig.parse({ cgroups: 'off' }), { driver: null, kind: 'process groups', unavailable: 'not requested' }, log, clock, rooms);
  }

  /** The cgroup version in use, or null. */
  get cgroupVersion(): 1 | 2 | null {
    return (this.#driver as CgroupDriver | null)?.version ?? null;
  }

  /** The agent's parent cgroups (empty without cgroups). */
  get cgroupParents(): readonly string[] {
    return (this.#driver as CgroupDriver | null)?.parents ?? [];
  }

  /** Live governed processes. */
  get processes(): number {
    return this.#live.size;
  }

  /** Every process of every live engine tree (whose GPU memory is the agent's, not its owner's). */
  pids(): number[] {
    return [...this.#live].flatMap((governed) => governed.processIds());
  }

  /**
   * Start an engine process, governed: as the engine user, in the working directory its spec names — else in an empty
   * one of its own, made here and removed when it ends, so nothing it opens by a relative path is the agent's (the
   * agent's working directory may be the orchestrator's data folder, with the signing key in it).
   */
  spawn(spec: SpawnSpec): GovernedProcess {
    const room = spec.cwd === undefined ? this.#room(spec.name) : null;
    let governed: GovernedProcess;
    try {
      governed = GovernedProcess.start({ ...spec, cwd: spec.cwd ?? room!, identity: this.engineUser.identity }, this.#driver, this.#log, { lifeline: this.kind === 'portable' });
    } catch (error) {
      if (room) rmSync(room, { recursive: true, force: true });
      throw error;
    }
    this.#live.add(governed);
    this.#records.record(governed.pid, spec.name);
    if (this.kind === 'portable' && governed.limits.memoryLimitMB !== null) this.#watchMemory();
    void governed.ended.then(() => {
      this.#live.delete(governed);
      this.#records.forget(governed.pid);
      if (room) rmSync(room, { recursive: true, force: true });
    });
    this.#log.debug({ engine: spec.name, pid: governed.pid, container: governed.container?.paths[0] ?? null, limits: spec.limits }, 'engine process started');
    return governed;
  }

  /** A folder the agent made for an engine process (its scratch), given to the engine user whole. */
  handOver(path: string): Promise<void> {
    return handOver(path, this.engineUser.identity);
  }

  /** An empty working directory for one engine process, the engine user's alone. */
  #room(name: string): string {
    mkdirSync(this.#workRoot, { recursive: true, mode: 0o711 });
    const room = mkdtempSync(join(this.#workRoot, `${safeName(name)}-`));
    const identity = this.engineUser.identity;
    if (identity) chownSync(room, identity.uid, identity.gid);
    return room;
  }

  /**
   * Portable governance's memory limit: every limited tree's memory read on the clock (its process group's resident
   * sets), and a tree over its limit stopped for it — as a cgroup or a Job Object would stop it, a moment later. The
   * watch runs while a limited tree lives.
   */
  #watchMemory(): void {
    this.#stopWatch ??= every(this.clock, MEMORY_POLL_MS, () => {
      const limited = [...this.#live].filter((governed) => governed.running && governed.limits.memoryLimitMB !== null);
      if (limited.length === 0) {
        this.#stopWatch?.();
        this.#stopWatch = null;
        return;
      }
      for (const governed of limited) {
        const heldMB = groupRssMB(governed.pid);
        if (heldMB === null || heldMB <= governed.limits.memoryLimitMB!) continue;
        this.#log.warn({ engine: governed.name, pid: governed.pid, heldMB, limitMB: governed.limits.memoryLimitMB }, 'engine process over its memory limit; stopping it');
        void governed.stopForMemory(heldMB, 0, this.clock);
      }
    });
  }

  /** Stop what still runs (SIGTERM, then SIGKILL after `graceMs`) and let the containers go (the agent's parent cgroup). */
  async close(graceMs = 2000): Promise<void> {
    this.#stopWatch?.();
    this.#stopWatch = null;
    await Promise.all([...this.#live].map((governed) => governed.stop(graceMs, this.clock)));
    await this.#driver?.close().catch((error: unknown) => this.#log.warn({ err: error }, 'could not remove the agent cgroup'));
  }
}

/** The platform's way to govern, or the portable one: asked for, or where nothing better is to be had. */
async function choose(config: GovernanceConfig, options: GovernorOptions): Promise<Choice> {
  if (config.mode === 'portable') return { driver: null, kind: 'portable', unavailable: null };
  if (process.platform === 'win32') {
    try {
      const { JobObjectDriver, probeJobObjects } = await import('./windows/job-driver.js');
      probeJobObjects();
      return { driver: new JobObjectDriver(), kind: 'job objects', unavailable: null };
    } catch (error) {
      return { driver: null, kind: 'portable', unavailable: `no job objects (${(error as Error).message})` };
    }
  }
  if (process.platform !== 'linux') return { driver: null, kind: 'portable', unavailable: null };
  const detection = await detectCgroups({
    mode: config.cgroups, cgroupRoot: config.cgroupRoot, agentDir: `${safeName(options.agentId)}.${process.pid}`, files: options.files,
  });
  return detection.driver
    ? { driver: detection.driver, kind: detection.driver.kind, unavailable: null }
    : { driver: null, kind: 'process groups', unavailable: detection.reason };
}
