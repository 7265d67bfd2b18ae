import { chownSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { CgroupDriver } from './cgroups/driver.js';
import { safeName } from './cgroups/cgroupfs.js';
import { detectCgroups, type DetectOptions } from './cgroups/detect.js';
import { systemClock, type Clock } from '../../protocol/clock.js';
import { GovernedProcess, type SpawnSpec } from './governed-process.js';
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

/**
 * The agent's authority over its engine processes: it knows, from one probe
 * at start, whether the host lets it use cgroups (and says which, or why not,
 * in one log line), starts every engine process governed, and on close ends
 * the ones still running and removes the agent's parent cgroup.
 */
export class Governor {
  readonly config: GovernanceConfig;
  readonly clock: Clock;
  readonly #driver: CgroupDriver | null;
  readonly #log: Logger;
  readonly #live = new Set<GovernedProcess>();
  /** Why there are no cgroups (null when there are). */
  readonly cgroupsUnavailable: string | null;
  /** Who engine processes run as. */
  readonly engineUser: EngineUser;
  readonly #workRoot: string;

  private constructor(config: GovernanceConfig, driver: CgroupDriver | null, unavailable: string | null, log: Logger, clock: Clock, rooms: { workRoot?: string; engineUser?: EngineUser }) {
    this.config = config;
    this.#driver = driver;
    this.cgroupsUnavailable = unavailable;
    this.#log = log;
    this.clock = clock;
    this.engineUser = rooms.engineUser ?? AGENT_USER;
    this.#workRoot = rooms.workRoot ?? join(tmpdir(), 'gpumesh-engines');
  }

  static async create(options: GovernorOptions): Promise<Governor> {
    const config = GovernanceConfig.parse(options.config ?? {});
    const detection = await detectCgroups({
      mode: config.cgroups, cgroupRoot: config.cgroupRoot, agentDir: `${safeName(options.agentId)}.${process.pid}`, files: options.files,
    });
    if (detection.driver) {
      options.log.info({ cgroups: detection.driver.version }, `process governance: ${detection.driver.description}`);
    } else {
      options.log.warn({ cgroups: null }, `process governance without cgroups: ${detection.reason}. ` +
        'Engine processes run in their own process groups, without memory, pids or CPU limits and without OOM reports');
    }
    return new Governor(config, detection.driver, detection.reason, options.log, options.clock ?? systemClock, options);
  }

  /** Process groups only, no detection and no log line (tests, and callers that govern nothing else). */
  static withoutCgroups(log: Logger, clock: Clock = systemClock, rooms: { workRoot?: string; engineUser?: EngineUser } = {}): Governor {
    return new Governor(GovernanceConfig.parse({ cgroups: 'off' }), null, 'not requested', log, clock, rooms);
  }

  /** The cgroup version in use, or null. */
  get cgroupVersion(): 1 | 2 | null {
    return this.#driver?.version ?? null;
  }

  /** The agent's parent cgroups (empty without cgroups). */
  get cgroupParents(): readonly string[] {
    return this.#driver?.parents ?? [];
  }

  /** Live governed processes. */
  get processes(): number {
    return this.#live.size;
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
      governed = GovernedProcess.start({ ...spec, cwd: spec.cwd ?? room!, identity: this.engineUser.identity }, this.#driver, this.#log);
    } catch (error) {
      if (room) rmSync(room, { recursive: true, force: true });
      throw error;
    }
    this.#live.add(governed);
    void governed.ended.then(() => {
      this.#live.delete(governed);
      if (room) rmSync(room, { recursive: true, force: true });
    });
    this.#log.debug({ engine: spec.name, pid: governed.pid, cgroup: governed.cgroup?.paths[0] ?? null }, 'engine process started');
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

  /** Stop what still runs (SIGTERM, then SIGKILL after `graceMs`) and remove the agent's parent cgroup. */
  async close(graceMs = 2000): Promise<void> {
    await Promise.all([...this.#live].map((governed) => governed.stop(graceMs, this.clock)));
    await this.#driver?.close().catch((error: unknown) => this.#log.warn({ err: error }, 'could not remove the agent cgroup'));
  }
}
