import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Device } from '../../protocol/index.js';
import { EngineError } from '../core/engine.js';
import { splitLines } from '../engines/kit/lines.js';
import type { EndpointProvider, EndpointRequest, ServerEndpoint, ServerExit } from '../engines/kit/endpoint.js';
import type { LaunchSettings } from '../../protocol/engines/server-settings.js';
import { safeName } from '../governance/cgroups/cgroupfs.js';
import { MissingExecutable } from '../governance/executable.js';
import { describeExit, exitError } from '../governance/exit-reason.js';
import { groupRssMB } from '../governance/process-memory.js';
import type { Governor } from '../governance/governor.js';
import { startServer, type ManagedServer } from '../governance/managed-server.js';
import type { EngineLimits, ServerSettingsInput } from '../../protocol/engines/process-settings.js';

export interface ServerLauncherOptions {
  governor: Governor;
  log: Logger;
  /** `${DATA_DIR}` of each server is a folder under this one: `<dataDir>/<engine>/<model>`. */
  dataDir: string;
  /** The host's ceilings for each engine's servers (the agent's `governance.engines`); a model's own limits apply up to them. */
  engineLimits?: Readonly<Record<string, EngineLimits>>;
}

/** The GPU a device is (its nvidia-smi index: `${GPU}` and CUDA_VISIBLE_DEVICES), or null for the CPU. */
function gpuIndex(device: Device): number | null {
  if (device.kind !== 'gpu') return null;
  const index = Number(device.id.replace(/^gpu/, ''));
  return Number.isInteger(index) && index >= 0 ? index : 0;
}

/** The smaller of two limits, where null or absent means none. */
function stricter(model: number | null, host: number | undefined): number | null {
  if (host === undefined) return model;
  return model === null ? host : Math.min(model, host);
}

/**
 * Starts the servers that models name by a command template, for the server
 * engines (their `EndpointProvider`): one governed process per loaded model
 * and device (its own process group and cgroup, limited by the model's
 * settings up to the host's ceilings), ready when its readiness check
 * passes. The model's unload stops it (scale to zero); an exit nobody asked
 * for settles the endpoint's `exited`, so residency drops the model and the
 * next batch starts a fresh server, paced by the agent's restart backoff.
 */
export class ServerLauncher {
  readonly #options: ServerLauncherOptions;
  readonly #live = new Set<ManagedServer>();

  constructor(options: ServerLauncherOptions) {
    this.#options = options;
  }

  readonly provider: EndpointProvider = (request) => this.#start(request);

  /** Servers running now (started and not yet gone). */
  get running(): number {
    return this.#live.size;
  }

  /** The servers running now: which model's, where, its pid and cgroup directories (for logs, status and tests). */
  servers(): { name: string; url: string; pid: number; cgroupPaths: readonly string[] }[] {
    return [...this.#live].map((server) => ({ name: server.name, url: server.url, pid: server.pid, cgroupPaths: server.cgroupPaths }));
  }

  /** Stop every server (agent shutdown); residency's unloads normally do this one by one. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.#live].map((server) => server.stop()));
  }

  async #start(request: EndpointRequest): Promise<ServerEndpoint> {
    const { engine, manifest, device, modelPath, launch } = request;
    if (!launch.command) {
      throw new EngineError('ENGINE_FAILED',
        `model "${manifest.name}" (${engine}) names neither settings.url (a server you run) nor settings.command (a server the agent starts)`, false);
    }
    const dataDir = join(this.#options.dataDir, safeName(engine), safeName(manifest.name));
    mkdirSync(dataDir, { recursive: true });
    // ${DATA_DIR} is the server's to write in, as the engine user.
    await this.#options.governor.handOver(dataDir);
    let server: ManagedServer;
    const asked = performance.now();
    try {
      server = await startServer(this.#options.governor, {
        name: `${engine}/${manifest.name}`, settings: this.#settings(engine, launch), modelPath: modelPath ?? '', dataDir, gpu: gpuIndex(device),
      }, this.#options.log);
    } catch (error) {
      // Every host lists every registered engine, but not every host has every server installed: let another try.
      if (error instanceof MissingExecutable) throw new EngineError('ENGINE_FAILED', `${error.message} on this host`, true, { cause: error });
      throw error;
    }
    const spawned = performance.now();
    this.#live.add(server);
    void server.exited.then(() => this.#live.delete(server));
    // A server that exits before it is ready (or is not ready in time, and is stopped) fails the load with why.
    await server.ready;
    const startup = { spawnMs: spawned - asked, readyMs: performance.now() - spawned };
    const exited = server.exited.then((reason): Promise<ServerExit> | ServerExit =>
      // Stopped by the agent (unload, shutdown): not a death to report; this never settles then.
      (reason.kind === 'stopped' ? new Promise<never>(() => {}) : { reason: describeExit(reason), error: exitError(reason) }));
    return {
      get url() {
        return server.url;
      },
      logLines: splitLines(server.output()),
      exited,
      idleUnloadMs: launch.idleStopMs,
      startup,
      // The server is its process group's leader: the group is the server and everything it started.
      residentMB: () => groupRssMB(server.pid),
      release: async () => {
        await server.stop();
      },
    };
  }

  /**
   * The server's governance settings: the model's launch settings, its limits held to the host's ceilings for
   * the engine. Its idle window is not the server's own timer: residency unloads the model after `idleStopMs`
   * and the unload stops the server, so the model is never counted resident on a server that is gone.
   */
  #settings(engine: string, launch: LaunchSettings): ServerSettingsInput {
    const host = this.#options.engineLimits?.[engine] ?? {};
    return {
      ...launch,
      command: launch.command!,
      idleStopMs: null,
      memoryLimitMB: stricter(launch.memoryLimitMB, host.memoryLimitMB),
      pidsLimit: stricter(launch.pidsLimit, host.pidsLimit),
      cpuWeight: Math.min(launch.cpuWeight, host.cpuWeight ?? launch.cpuWeight),
    };
  }
}
