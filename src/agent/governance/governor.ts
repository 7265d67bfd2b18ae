import type { Logger } from 'pino';
import type { CgroupDriver } from './cgroups/driver.js';
import { safeName } from './cgroups/cgroupfs.js';
import { detectCgroups, type DetectOptions } from './cgroups/detect.js';
import { systemClock, type Clock } from '../../protocol/clock.js';
import { GovernedProcess, type SpawnSpec } from './governed-process.js';
import { GovernanceConfig, type GovernanceConfigInput } from '../../protocol/engines/process-settings.js';

export interface GovernorOptions {
  /** This agent's id (its host id); with the agent's pid it names the agent's parent cgroup. */
  agentId: string;
  config?: GovernanceConfigInput;
  log: Logger;
  clock?: Clock;
  /** Where detection reads the mounts and the process's cgroups (tests). */
  files?: DetectOptions['files'];
}

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

  private constructor(config: GovernanceConfig, driver: CgroupDriver | null, unavailable: string | null, log: Logger, clock: Clock) {
    this.config = config;
    this.#driver = driver;
    this.cgroupsUnavailable = unavailable;
    this.#log = log;
    this.clock = clock;
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
    return new Governor(config, detection.driver, detection.reason, options.log, options.clock ?? systemClock);
  }

  /** Process groups only, no detection and no log line (tests, and callers that govern nothing else). */
  static withoutCgroups(log: Logger, clock: Clock = systemClock): Governor {
    return new Governor(GovernanceConfig.parse({ cgroups: 'off' }), null, 'not requested', log, clock);
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

  spawn(spec: SpawnSpec): GovernedProcess {
    const governed = GovernedProcess.start(spec, this.#driver, this.#log);
    this.#live.add(governed);
    void governed.ended.then(() => this.#live.delete(governed));
    this.#log.debug({ engine: spec.name, pid: governed.pid, cgroup: governed.cgroup?.paths[0] ?? null }, 'engine process started');
    return governed;
  }

  /** Stop what still runs (SIGTERM, then SIGKILL after `graceMs`) and remove the agent's parent cgroup. */
  async close(graceMs = 2000): Promise<void> {
    await Promise.all([...this.#live].map((governed) => governed.stop(graceMs, this.clock)));
    await this.#driver?.close().catch((error: unknown) => this.#log.warn({ err: error }, 'could not remove the agent cgroup'));
  }
}
