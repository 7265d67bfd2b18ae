import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import type { Device, ToolReport, UnavailableClass } from '../protocol/index.js';
import { every, systemClock, workClock } from '../protocol/clock.js';
import { BatchRunner } from './batches/batch-runner.js';
import { InputPictures } from './batches/input-pictures.js';
import type { Engine } from './core/engine.js';
import { detectDevices } from './devices.js';
import { onnxWorkerEntry } from './engines/onnx/index.js';
import { buildEngines } from './engines/registry.js';
import { prepareEngineUser } from './governance/engine-user.js';
import { Governor, platformName } from './governance/governor.js';
import { findNvidiaSmi } from './governance/executable.js';
import { Supervisor } from './governance/supervisor.js';
import { HostPolicy } from './host-policy/host-policy.js';
import { macAddresses } from './host-policy/mac-addresses.js';
import { AgentLink, type LinkTarget } from './link/link.js';
import { linkTargets } from './link/targets.js';
import { Catalogues } from './models/catalogues.js';
import { HostConfig } from './models/host-config.js';
import { LoadRequests } from './models/load-requests.js';
import { ModelCache } from './models/model-cache.js';
import { Residency } from './models/residency.js';
import { ServerLauncher } from './models/server-launcher.js';
import type { AgentOptions } from './options.js';
import { AgentRelays } from './relay/relays.js';
import { Drain } from './session/drain.js';
import { deliver } from './session/inbox.js';
import { Session, type HostDescription } from './session/session.js';
import { findFfmpeg } from './video/ffmpeg.js';
import type { FoundTool, MissingTool } from './video/find-tool.js';
import { videoClass } from './video/video-class.js';

export type { AgentOptions } from './options.js';

/**
 * The agent process: one per host. A facade over its parts — the link (link/), the session over it (session/:
 * hello, heartbeat, results kept until acknowledged; draining), the batches it runs (batches/) and the models it
 * keeps resident (models/) — which it builds, wires and routes the orchestrator's messages to.
 */
export class Agent {
  readonly #options: Required<Pick<AgentOptions, 'concurrency' | 'idleUnloadMs'>> & AgentOptions;
  readonly #log: Logger;
  readonly #devices: Device[];
  readonly #governor: Governor;
  readonly #supervisor: Supervisor;
  readonly #servers: ServerLauncher;
  readonly #engines: Map<string, Engine>;
  /** The classes this host announces: the configured ones, less `video` on a host without ffmpeg. */
  readonly #classes: string[];
  /** Configured classes it cannot serve, and why: announced in its hello so the mesh can say so. */
  readonly #unavailable: UnavailableClass[];
  readonly #tools: ToolReport[];
  readonly #cache: ModelCache;
  readonly #residency: Residency;
  /** The orchestrators it may link to, each trusted on its own (each serves the mesh's CA at its own URL). */
  readonly #targets: LinkTarget[];
  readonly #link: AgentLink;
  readonly #session: Session;
  readonly #drain: Drain;
  readonly #batches: BatchRunner;
  readonly #loads: LoadRequests;
  /** Clients' requests and WebSockets to the ComfyUIs this host passes through (relay/). */
  readonly #relays: AgentRelays;
  /** Which models take clients' workflows, and what their servers offer: reported to the orchestrator. */
  readonly #catalogues: Catalogues;
  /** Whether the host takes work (its owner, its hours, its heat), when it sleeps, and its GPUs' readings. */
  readonly #policy: HostPolicy;
  #stopIdleSweep: (() => void) | null = null;
  #rejected: ((reason: string) => void) | null = null;
  /** Outputs up to this size travel inside `done` (the orchestrator says how much in its welcome). */
  #inlineOutputBytes = 0;
  /** Whether the orchestrator linked now frees a batch's slot on `computed` (its welcome says; an older one does not). */
  #freesSlotOnComputed = false;

  private constructor(options: AgentOptions, devices: Device[], governor: Governor, ffmpeg: FoundTool | MissingTool, log: Logger) {
    this.#options = { concurrency: 1, idleUnloadMs: 5 * 60_000, ...options };
    this.#log = log;
    this.#devices = devices;
    this.#governor = governor;
    this.#supervisor = new Supervisor(log.child({ part: 'supervisor' }), governor, governor.config.onnx);
    // Engines are plug-ins (engines/registry.ts): built from the registry with the services they share.
    this.#servers = new ServerLauncher({
      governor, log: log.child({ part: 'servers' }), dataDir: join(options.dataDir, 'servers'), engineLimits: governor.config.engines,
    });
    const video = videoClass({
      governor, ffmpeg, classes: options.classes, scratchDir: join(options.dataDir, 'video'), limits: governor.config.engines.ffmpeg, log: log.child({ part: 'video' }),
    });
    this.#classes = video.classes;
    this.#unavailable = video.unavailable;
    this.#tools = video.tools;
    this.#engines = buildEngines({
      supervisor: this.#supervisor, governor, endpoints: this.#servers.provider, clock: workClock, log: log.child({ part: 'engines' }), video: video.encoder,
    }, options.engines);
    this.#targets = linkTargets(options.url, options.grant, options.tlsCaFingerprint);
    // Pulls go to the orchestrator linked now (the one dialled, while none is): after a failover, the one taken over.
    const fetchBlob = (digest: string, signal: AbortSignal): Promise<Response> => {
      const { url, trust } = this.#link.target;
      return trust.fetch(new URL(`/v1/blobs/${digest}`, url), { headers: { authorization: `Bearer ${options.grant}` }, signal });
    };
    this.#cache = new ModelCache(join(options.dataDir, 'models'), fetchBlob, {
      onRepair: (digest, reason) => log.warn({ digest, reason }, 'cached model file is corrupt; deleting it and pulling it again'),
    });
    this.#residency = new Residency({
      engines: this.#engines, devices: () => this.#devices, cache: this.#cache, log: log.child({ part: 'residency' }),
      hostConfig: options.hostConfig ?? HostConfig.none(), clock: options.clock,
      events: {
        loaded: (model, handle) => {
          this.#link.send({ type: 'loaded', model: model.model, digest: model.digest, device: model.device, memoryMB: model.memoryMB });
          this.#catalogues.loaded(handle);
        },
        unloaded: (model) => {
          this.#link.send({ type: 'unloaded', ...model });
          this.#catalogues.unloaded(model.model);
          // Its memory is free now: the mesh books the device by the figure it hears, and an unload asked for answers
          // with it (ReplicaRequests), so it hears it now rather than at the next beat.
          this.#session.beat();
        },
      },
    });
    this.#catalogues = new Catalogues({
      engines: this.#engines, hostConfig: options.hostConfig ?? HostConfig.none(), send: (message) => this.#link.send(message), log: log.child({ part: 'catalogues' }),
    });
    // A batch that peaked higher than any before raises its device's figure: the mesh hears of it now, not at the next beat.
    this.#residency.onChargeGrew(() => this.#session.beat());
    this.#session = new Session({
      send: (message) => this.#link.send(message), clock: options.clock ?? systemClock,
      describe: () => this.#describe(), running: () => this.#batches.held(), draining: () => this.#drain.draining,
      beat: () => ({ resident: this.#residency.resident(), devices: this.#deviceReport(), ...(this.#policy.watching ? { away: this.#policy.away } : {}) }),
      settled: () => this.#drain.check(),
    });
    this.#drain = new Drain({
      work: () => this.work, announce: () => this.#link.send({ type: 'draining' }), close: () => this.close(),
      clock: options.clock ?? workClock, log,
    });
    this.#batches = new BatchRunner({
      residency: this.#residency, pictures: new InputPictures(fetchBlob), log: log.child({ part: 'batches' }), reportDelayMs: this.#options.reportDelayMs, clock: options.clock,
      send: (message) => this.#link.send(message),
      report: (result) => this.#session.report(result),
      deliver: { target: () => this.#link.target, inlineBytes: () => this.#inlineOutputBytes },
      computed: (batchId) => {
        if (this.#freesSlotOnComputed) this.#link.send({ type: 'computed', batchId });
      },
      ended: (model) => {
        this.#loads.batchEnded(model);
        this.#drain.check();
      },
      energyJ: (device) => this.#policy.energyJ(device, (options.clock ?? systemClock).now()),
    });
    const { wake: _wake, ...policies } = (options.hostConfig ?? HostConfig.none()).policies;
    this.#policy = new HostPolicy({
      host: options.host, policies, devices, nvidiaSmi: options.nvidiaSmi ?? findNvidiaSmi(), clock: options.clock ?? systemClock, log,
      batches: this.#batches, residency: this.#residency, ownPids: () => new Set([process.pid, ...governor.pids()]),
      idle: () => this.#batches.size === 0 && this.#session.unacknowledged === 0 && !this.#drain.draining,
      changed: () => this.#session.beat(),
      sleep: async () => {
        await this.#residency.unloadAll();
        this.#session.disconnected();
        this.#link.pause();
      },
      wake: () => this.#link.resume(),
    });
    this.#loads = new LoadRequests({
      residency: this.#residency, send: (message) => this.#link.send(message), log: log.child({ part: 'loads' }),
      busy: (model) => this.#batches.busy(model) || this.#relays.holds(model),
      draining: () => this.#drain.draining,
    });
    this.#relays = new AgentRelays({
      residency: this.#residency, hostConfig: options.hostConfig ?? HostConfig.none(), send: (message) => this.#link.send(message), log: log.child({ part: 'relay' }),
      refusal: () => (this.#drain.draining ? 'this host is draining' : this.#policy.away?.reason ?? null),
      released: (model) => this.#loads.batchEnded(model),
    });
    this.#link = new AgentLink({
      targets: this.#targets, connect: options.connect, grant: options.grant, log: log.child({ part: 'link' }), clock: options.clock,
      hello: () => this.#session.hello(),
      onWelcome: (welcome) => {
        this.#inlineOutputBytes = welcome.inlineOutputBytes;
        this.#freesSlotOnComputed = welcome.freesSlotOnComputed === true;
        this.#session.welcomed(welcome.heartbeatMs);
        this.#catalogues.welcomed(welcome.takesCatalogues === true);
      },
      onMessage: (message) => deliver(message, {
        policy: this.#policy, batches: this.#batches, session: this.#session, loads: this.#loads, relays: this.#relays,
        drainRequested: () => {
          void this.drain();
          if (this.#options.onDrainRequested) this.#options.onDrainRequested();
          else void this.leave().then(() => this.#log.info('drained and left, as the orchestrator asked'));
        },
      }),
      onRejected: (reason, by) => {
        log.error({ reason }, by === 'orchestrator' ? 'the orchestrator refused this agent' : 'refusing to connect to the orchestrator');
        this.#rejected?.(by === 'orchestrator' ? `refused by the orchestrator: ${reason}` : reason);
      },
      onDisconnected: () => {
        this.#session.disconnected();
        this.#relays.disconnected();
        // Model pulls come from the orchestrator that just went away; a pull cut off mid-stream can
        // hang instead of failing, so end them now and let their batches fail over.
        this.#cache.abortPulls('the orchestrator link went down');
      },
    });
  }

  static async create(options: AgentOptions): Promise<Agent> {
    const log = options.log ?? pino({ level: process.env.GPUMESH_LOG_LEVEL ?? 'info' });
    const devices = await detectDevices({ cpuBudgetMB: options.cpuBudgetMB, nvidiaSmi: options.nvidiaSmi });
    log.info({ host: options.host, devices: devices.map((device) => `${device.id} ${device.name} ${device.budgetMB} MB`) }, 'devices');
    const { engineUser, workRoot } = prepareEngineUser({ requested: options.engineUser, dataDir: options.dataDir, code: [process.execPath, onnxWorkerEntry().path], log });
    const governor = await Governor.create({ agentId: options.host, config: options.governance, log: log.child({ part: 'governance' }), workRoot, engineUser });
    return new Agent(options, devices, governor, options.ffmpeg ?? await findFfmpeg(), log);
  }

  /**
   * Dial the orchestrator. `onRejected` is called, with a sentence, if it refuses this agent for good
   * or its TLS CA is not the pinned one.
   */
  start(onRejected?: (reason: string) => void): void {
    this.#rejected = onRejected ?? null;
    // The first look at the owner, the hours and the heat comes before the hello, which then says whether it takes work.
    if (this.#policy.watching) void this.#policy.start().then(() => this.#link.start());
    else this.#link.start();
    const { idleUnloadMs } = this.#options;
    this.#stopIdleSweep = every(this.#options.clock ?? systemClock, Math.max(1000, Math.min(30_000, idleUnloadMs / 2)), () => {
      this.#residency.unloadIdle(idleUnloadMs).catch((error: unknown) => this.#log.warn({ err: error }, 'idle unload failed'));
    });
  }

  get connected(): boolean {
    return this.#link.connected;
  }

  /** Classes this host was asked to serve and cannot, with why (`video` without ffmpeg). */
  get unavailable(): readonly UnavailableClass[] {
    return this.#unavailable;
  }

  /** The programs it found for its work (ffmpeg: path, source, version). */
  get tools(): readonly ToolReport[] {
    return this.#tools;
  }

  /** Live engine processes: workers and servers (0 when scaled to zero). */
  get engineProcesses(): number {
    return this.#supervisor.count + this.#servers.running;
  }

  /** Batches running and results not yet acknowledged: what a drain waits for. */
  get work(): { batches: number; unacknowledged: number } {
    return { batches: this.#batches.size, unacknowledged: this.#session.unacknowledged };
  }

  /**
   * Stop taking work: tell the orchestrator (it routes nothing new here), finish the batches in flight and
   * resolve once every result is acknowledged. Batches the orchestrator sent before it heard still run.
   */
  drain(): Promise<void> {
    return this.#drain.start();
  }

  /** Drain, then close the link normally (the orchestrator records that the host left). False if `timeoutMs` ran out first. */
  leave(options: { timeoutMs?: number } = {}): Promise<boolean> {
    return this.#drain.leave(options);
  }

  async close(): Promise<void> {
    this.#session.disconnected();
    this.#relays.disconnected();
    this.#stopIdleSweep?.();
    this.#policy.stop();
    this.#link.close();
    for (const engine of this.#engines.values()) await engine.close();
    await this.#servers.stopAll();
    await this.#supervisor.stopAll();
    await this.#governor.close();
    for (const target of this.#targets) target.trust.close();
  }

  /** The host as its hello describes it (the session adds the work it holds). */
  #describe(): HostDescription {
    return {
      host: this.#options.host, classes: this.#classes, devices: this.#deviceReport(), engines: [...this.#engines.keys()], models: this.#cache.cached,
      concurrency: this.#options.concurrency, resident: this.#residency.resident(),
      ...(this.#unavailable.length > 0 ? { unavailable: this.#unavailable } : {}), tools: this.#tools,
      engineUser: this.#governor.engineUser.description, platform: platformName(), governance: this.#governor.kind, configured: (this.#options.hostConfig ?? HostConfig.none()).declared,
      ...(this.#policy.away ? { away: this.#policy.away } : {}),
      ...(this.#options.hostConfig?.policies.wake?.announce ? { macs: macAddresses() } : {}),
      ...(this.#options.hostConfig?.passedThrough.length ? { passthrough: this.#options.hostConfig.passedThrough } : {}),
    };
  }

  #deviceReport(): Device[] {
    return this.#devices.map((device) => {
      const reading = this.#policy.reading(device.id);
      const heat = reading ? { temperatureC: reading.temperatureC, powerW: reading.powerW, powerLimitW: reading.powerLimitW } : {};
      return { ...device, usedMB: this.#residency.usedMB(device.id), ...heat };
    });
  }
}
