import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import {
  LINK_PROTOCOL_VERSION, MeshError, type AgentMessage, type Device, type OrchestratorMessage,
  type ToolReport, type UnavailableClass,
} from '../protocol/index.js';
import { ServerTrust, parseFingerprint, pinsOfGrant, type Pin } from '../tls-client/index.js';
import { VERSION } from '../version.js';
import { detectDevices } from './devices.js';
import type { Engine } from './core/engine.js';
import { workClock } from '../protocol/clock.js';
import { buildEngines } from './engines/registry.js';
import { Governor } from './governance/governor.js';
import { resolveEngineUser } from './governance/engine-user.js';
import { HostConfig } from './models/host-config.js';
import { onnxWorkerEntry } from './engines/onnx/index.js';
import type { GovernanceConfigInput } from '../protocol/engines/process-settings.js';
import { AgentLink, type AgentLinkOptions, type LinkTarget } from './link/link.js';
import { LoadRequests } from './models/load-requests.js';
import { ModelCache } from './models/model-cache.js';
import { InputPictures } from './batches/input-pictures.js';
import { BatchRunner, type Result } from './batches/batch-runner.js';
import { Residency } from './models/residency.js';
import { ServerLauncher } from './models/server-launcher.js';
import { Supervisor } from './governance/supervisor.js';
import { VideoEncoder } from './video/encoder.js';
import { FFMPEG_HINT, findFfmpeg } from './video/ffmpeg.js';
import type { FoundTool, MissingTool } from './video/find-tool.js';


export interface AgentOptions {
  /**
   * The orchestrator's base URL, or several: orchestrators sharing one store, one active and the others standbys.
   * The link goes round them until one welcomes it; model pulls and large outputs go over HTTP to the one linked.
   */
  url: string | readonly string[];
  /** Link to an orchestrator in this process instead of dialling `url` (`gpumesh up`): see AgentLinkOptions.connect. */
  connect?: AgentLinkOptions['connect'];
  /** An agent grant (`gpumesh grant create --agent --host <id>`). On a TLS mesh it names the CA to pin (`tls-ca`). */
  grant: string;
  /** A CA fingerprint to pin besides the grant's, for a grant that names none (`--tls-ca-fingerprint`). */
  tlsCaFingerprint?: string;
  /** This host's id; must match the grant's host. */
  host: string;
  /** Routing classes this host serves (`image`, `video`, …). */
  classes: string[];
  /** Model cache and other state. */
  dataDir: string;
  /** Memory budget for models on the CPU (MB); default: half the RAM, at most 8 GiB. */
  cpuBudgetMB?: number;
  /** Batches run at once. Default 1 (one device, one forward pass at a time). */
  concurrency?: number;
  /** Unload a model idle this long; its engine process ends with the last one (scale to zero). Default 5 min. */
  idleUnloadMs?: number;
  nvidiaSmi?: string;
  /** How engine processes are governed: cgroups (auto, v2, v1, off), the ONNX worker's limits, ceilings per engine. */
  governance?: GovernanceConfigInput;
  /** The engines this agent runs (and lists in its hello), by registered name. Default: every registered engine. */
  engines?: string[];
  log?: Logger;
  /**
   * How long a batch's `started` and `progress` reports are held back, so a batch that ends sooner sends only its
   * results (see BatchReports). Default 10 ms; 0 sends each at once.
   */
  reportDelayMs?: number;
  /** The orchestrator sent `drain` (an admin drained this host); the agent is draining. Default: leave when drained. */
  onDrainRequested?: () => void;
  /** The ffmpeg clips are encoded with, or why there is none. Default: looked up at start (findFfmpeg). */
  ffmpeg?: FoundTool | MissingTool;
  /**
   * Who engine processes run as when the agent runs as root (`--engine-user`): default `nobody`; `root` keeps them
   * root. An agent running as an ordinary user runs them as itself. See resolveEngineUser.
   */
  engineUser?: string;
  /**
   * What this host's owner lets the mesh run here (`--config host.yaml`; `gpumesh up` gives its agent mesh.yaml's
   * models): commands, servers and the other host settings come only from it. Default: none (data models only).
   */
  hostConfig?: HostConfig;
}

/** What the agent pins: the grant's `tls-ca` caveats and the fingerprint it was given. */
function agentPins(options: AgentOptions): Pin[] {
  const pins = pinsOfGrant(options.grant);
  if (options.tlsCaFingerprint) {
    const fingerprint = parseFingerprint(options.tlsCaFingerprint);
    if (!fingerprint) throw new MeshError('AGENT_OPTIONS_INVALID', { detail: `--tls-ca-fingerprint "${options.tlsCaFingerprint}" is not a SHA-256 fingerprint (sha256:<64 hex>, as \`gpumesh status\` on the orchestrator prints it)` });
    pins.push({ fingerprint, source: '--tls-ca-fingerprint' });
  }
  return pins;
}

/**
 * The agent process: one per host. It dials the orchestrator, keeps models
 * resident under the devices' budgets, runs batches on its engines, uploads
 * outputs and reports results — re-sending them until the orchestrator
 * acknowledges, so a restart of either side loses no finished work.
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
  readonly #link: AgentLink;
  /** The orchestrators it may link to, each trusted on its own (each serves the mesh's CA at its own URL). */
  readonly #targets: LinkTarget[];
  readonly #batches: BatchRunner;
  readonly #unacked = new Map<string, Result>();
  #heartbeat: NodeJS.Timeout | null = null;
  #idleSweep: NodeJS.Timeout | null = null;
  #rejected: ((reason: string) => void) | null = null;
  /** Outputs up to this size travel inside `done` (the orchestrator says how much in its welcome). */
  #inlineOutputBytes = 0;
  /** Whether the orchestrator linked now frees a batch's slot on `computed` (its welcome says; an older one does not). */
  #freesSlotOnComputed = false;
  readonly #loads: LoadRequests;
  /** Set once the agent drains: resolved when nothing runs and every result is acknowledged. */
  #drain: { done: Promise<void>; resolve: () => void } | null = null;

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
    // Clips are encoded by ffmpeg, a governed process like every engine's; a host without it does not serve video.
    const video = new VideoEncoder({
      governor, ffmpeg, scratchDir: join(options.dataDir, 'video'), limits: governor.config.engines.ffmpeg, log: log.child({ part: 'video' }),
    });
    if ('path' in ffmpeg) log.info({ ffmpeg: ffmpeg.path, source: ffmpeg.source, version: ffmpeg.version }, 'video: clips are encoded with ffmpeg');
    this.#tools = 'path' in ffmpeg ? [ffmpeg] : [];
    void video.sweep().then((removed) => {
      if (removed > 0) log.info({ removed }, 'video: removed clips a previous agent left unfinished');
    }, (error: unknown) => log.warn({ err: error }, 'video: could not sweep the scratch folder'));
    this.#classes = options.classes.filter((name) => name !== 'video' || video.unavailable === null);
    this.#unavailable = video.unavailable !== null && options.classes.includes('video') ? [{ class: 'video', reason: video.unavailable }] : [];
    if (this.#unavailable.length > 0) {
      log.warn({ classes: this.#classes }, `not serving the video class: ${video.unavailable} (${FFMPEG_HINT})`);
    }
    this.#engines = buildEngines({
      supervisor: this.#supervisor, governor, endpoints: this.#servers.provider, clock: workClock, log: log.child({ part: 'engines' }), video,
    }, options.engines);
    const pins = agentPins(options);
    this.#targets = (typeof options.url === 'string' ? [options.url] : options.url).map((url) => ({ url, trust: new ServerTrust(url, pins) }));
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
      hostConfig: options.hostConfig ?? HostConfig.none(),
      events: {
        loaded: (model) => this.#link.send({ type: 'loaded', model: model.model, digest: model.digest, device: model.device, memoryMB: model.memoryMB }),
        unloaded: (model) => this.#link.send({ type: 'unloaded', ...model }),
      },
    });
    // A batch that peaked higher than any before raises its device's figure: the mesh hears of it now, not at the next beat.
    this.#residency.onChargeGrew(() => {
      if (this.#link.connected) this.#link.send({ type: 'heartbeat', resident: this.#residency.resident(), devices: this.#deviceReport() });
    });
    this.#batches = new BatchRunner({
      residency: this.#residency, pictures: new InputPictures(fetchBlob), log: log.child({ part: 'batches' }), reportDelayMs: this.#options.reportDelayMs,
      send: (message) => this.#link.send(message),
      report: (result) => this.#report(result),
      deliver: { target: () => this.#link.target, inlineBytes: () => this.#inlineOutputBytes },
      computed: (batchId) => {
        if (this.#freesSlotOnComputed) this.#link.send({ type: 'computed', batchId });
      },
      ended: (model) => {
        this.#loads.batchEnded(model);
        this.#checkDrained();
      },
    });
    this.#loads = new LoadRequests({
      residency: this.#residency, send: (message) => this.#link.send(message), log: log.child({ part: 'loads' }),
      busy: (model) => this.#batches.busy(model),
      draining: () => this.#drain !== null,
    });
    this.#link = new AgentLink({
      targets: this.#targets, connect: options.connect, grant: options.grant, log: log.child({ part: 'link' }),
      hello: () => this.#hello(),
      onWelcome: (welcome) => {
        this.#inlineOutputBytes = welcome.inlineOutputBytes;
        this.#freesSlotOnComputed = welcome.freesSlotOnComputed === true;
        this.#onWelcome(welcome.heartbeatMs);
      },
      onMessage: (message) => this.#onMessage(message),
      onRejected: (reason, by) => {
        log.error({ reason }, by === 'orchestrator' ? 'the orchestrator refused this agent' : 'refusing to connect to the orchestrator');
        this.#rejected?.(by === 'orchestrator' ? `refused by the orchestrator: ${reason}` : reason);
      },
      onDisconnected: () => {
        this.#stopHeartbeat();
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
    // What engine processes need to reach, made first so the probe as the engine user can check it.
    const models = join(options.dataDir, 'models');
    const workRoot = join(options.dataDir, 'engines');
    mkdirSync(models, { recursive: true });
    mkdirSync(workRoot, { recursive: true, mode: 0o711 });
    const engineUser = resolveEngineUser(options.engineUser, { read: [process.execPath, onnxWorkerEntry().path, models], enter: [workRoot] });
    if (engineUser.unprivileged) log.info({ engineUser: engineUser.description }, `engine processes run as ${engineUser.description}`);
    else {
      log.warn({ engineUser: engineUser.description }, `engine processes run as ${engineUser.description}: what an engine reads is not kept from root's files. ` +
        'Give the engine user access to those folders (chmod o+x on each folder above them), or run the agent as an ordinary user');
    }
    const governor = await Governor.create({ agentId: options.host, config: options.governance, log: log.child({ part: 'governance' }), workRoot, engineUser });
    return new Agent(options, devices, governor, options.ffmpeg ?? await findFfmpeg(), log);
  }

  /**
   * Dial the orchestrator. `onRejected` is called, with a sentence, if it refuses this agent for good
   * or its TLS CA is not the pinned one.
   */
  start(onRejected?: (reason: string) => void): void {
    this.#rejected = onRejected ?? null;
    this.#link.start();
    const sweepMs = Math.max(1000, Math.min(30_000, this.#options.idleUnloadMs / 2));
    this.#idleSweep = setInterval(() => {
      this.#residency.unloadIdle(this.#options.idleUnloadMs).catch((error: unknown) => this.#log.warn({ err: error }, 'idle unload failed'));
    }, sweepMs);
    this.#idleSweep.unref();
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
    return { batches: this.#batches.size, unacknowledged: this.#unacked.size };
  }

  /**
   * Stop taking work: tell the orchestrator (it routes nothing new here), finish the batches in flight and
   * resolve once every result is acknowledged. Batches the orchestrator sent before it heard still run.
   */
  drain(): Promise<void> {
    if (!this.#drain) {
      let resolve!: () => void;
      const done = new Promise<void>((settle) => (resolve = settle));
      this.#drain = { done, resolve };
      this.#log.info(this.work, 'draining: finishing the work in flight, taking no more');
      // If the link is down now, the next hello says so instead.
      this.#link.send({ type: 'draining' });
      this.#checkDrained();
    }
    return this.#drain.done;
  }

  /** Drain, then close the link normally (the orchestrator records that the host left). False if `timeoutMs` ran out first. */
  async leave(options: { timeoutMs?: number } = {}): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([
      this.drain().then(() => true),
      new Promise<boolean>((resolve) => {
        if (options.timeoutMs !== undefined) timer = setTimeout(() => resolve(false), options.timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (!drained) this.#log.warn(this.work, 'the drain timed out; leaving with work unfinished (the orchestrator fails it over)');
    await this.close();
    return drained;
  }

  #checkDrained(): void {
    if (this.#drain && this.#batches.size === 0 && this.#unacked.size === 0) this.#drain.resolve();
  }

  async close(): Promise<void> {
    this.#stopHeartbeat();
    if (this.#idleSweep) clearInterval(this.#idleSweep);
    this.#link.close();
    for (const engine of this.#engines.values()) await engine.close();
    await this.#servers.stopAll();
    await this.#supervisor.stopAll();
    await this.#governor.close();
    for (const target of this.#targets) target.trust.close();
  }

  #hello(): Extract<AgentMessage, { type: 'hello' }> {
    return {
      type: 'hello', protocol: LINK_PROTOCOL_VERSION, host: this.#options.host, classes: this.#classes,
      devices: this.#deviceReport(), engines: [...this.#engines.keys()], models: this.#cache.cached,
      // What this host still holds: batches running, and results the orchestrator has not acknowledged (they arrive again after welcome).
      inFlight: [
        ...this.#batches.held(),
        ...[...this.#unacked.values()].map((result) => ({ jobId: result.jobId, batchId: result.batchId })),
      ],
      concurrency: this.#options.concurrency, version: VERSION,
      resident: this.#residency.resident(), draining: this.#drain !== null,
      ...(this.#unavailable.length > 0 ? { unavailable: this.#unavailable } : {}), tools: this.#tools,
      engineUser: this.#governor.engineUser.description,
      configured: (this.#options.hostConfig ?? HostConfig.none()).declared,
    };
  }

  #deviceReport(): Device[] {
    return this.#devices.map((device) => ({ ...device, usedMB: this.#residency.usedMB(device.id) }));
  }

  #onWelcome(heartbeatMs: number): void {
    // Results the previous connection may not have delivered go again; the orchestrator ignores duplicates.
    for (const result of this.#unacked.values()) this.#link.send(result);
    this.#stopHeartbeat();
    this.#heartbeat = setInterval(() => this.#link.send({
      type: 'heartbeat', resident: this.#residency.resident(), devices: this.#deviceReport(),
    }), heartbeatMs);
    this.#heartbeat.unref();
  }

  #stopHeartbeat(): void {
    if (this.#heartbeat) clearInterval(this.#heartbeat);
    this.#heartbeat = null;
  }

  #onMessage(message: OrchestratorMessage): void {
    switch (message.type) {
      case 'run':
        void this.#batches.run(message);
        return;
      case 'cancel':
        this.#batches.cancel(message.jobId);
        // A result the orchestrator will not take (the job moved on or ended) is not worth re-sending.
        this.#unacked.delete(message.jobId);
        this.#checkDrained();
        return;
      case 'ack':
        for (const jobId of message.jobIds) this.#unacked.delete(jobId);
        this.#checkDrained();
        return;
      case 'load':
        void this.#loads.load(message.model, message.hold);
        return;
      case 'unload':
        void this.#loads.unload(message.model);
        return;
      case 'drain':
        void this.drain();
        if (this.#options.onDrainRequested) this.#options.onDrainRequested();
        else void this.leave().then(() => this.#log.info('drained and left, as the orchestrator asked'));
        return;
      case 'welcome':
        return;
      default:
        return unhandled(message);
    }
  }

  #report(result: Result): void {
    this.#unacked.set(result.jobId, result);
    this.#link.send(result);
  }
}

/** Compile-time exhaustiveness: a new orchestrator message without a case here does not build. */
function unhandled(message: never): void {
  throw new Error(`unhandled orchestrator message ${JSON.stringify(message)}`);
}
