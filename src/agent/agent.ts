import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import {
  LINK_PROTOCOL_VERSION, pixelsOf, type AgentMessage, type BatchMemoryReport, type Device, type OrchestratorMessage,
} from '../protocol/index.js';
import { VERSION } from '../version.js';
import { detectDevices } from './devices.js';
import { EngineError, type Engine, type JobOutput, type LoadedModel } from './engines/engine.js';
import { OnnxEngine } from './engines/onnx/engine.js';
import { AgentLink } from './link.js';
import { ModelCache } from './model-cache.js';
import { Residency } from './residency.js';
import { Supervisor } from './supervisor.js';
import { uploadOutput } from './uploads.js';

type Run = Extract<OrchestratorMessage, { type: 'run' }>;
type Result = Extract<AgentMessage, { type: 'done' | 'failed' }>;

export interface AgentOptions {
  /** The orchestrator's base URL. */
  url: string;
  /** An agent grant (`gpumesh grant create --agent --host <id>`). */
  grant: string;
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
  log?: Logger;
}

interface RunningBatch {
  id: string;
  jobIds: Set<string>;
  cancelled: Set<string>;
  cancel(jobIds: string[]): void;
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
  readonly #supervisor: Supervisor;
  readonly #engines: Map<string, Engine>;
  readonly #cache: ModelCache;
  readonly #residency: Residency;
  readonly #link: AgentLink;
  readonly #running = new Map<string, RunningBatch>();
  readonly #unacked = new Map<string, Result>();
  #heartbeat: NodeJS.Timeout | null = null;
  #idleSweep: NodeJS.Timeout | null = null;
  #rejected: ((reason: string) => void) | null = null;

  private constructor(options: AgentOptions, devices: Device[], log: Logger) {
    this.#options = { concurrency: 1, idleUnloadMs: 5 * 60_000, ...options };
    this.#log = log;
    this.#devices = devices;
    this.#supervisor = new Supervisor(log.child({ part: 'supervisor' }));
    this.#engines = new Map<string, Engine>([['onnx', new OnnxEngine(this.#supervisor)]]);
    this.#cache = new ModelCache(join(options.dataDir, 'models'), (digest, signal) =>
      fetch(new URL(`/v1/blobs/${digest}`, options.url), { headers: { authorization: `Bearer ${options.grant}` }, signal }), {
      onRepair: (digest, reason) => log.warn({ digest, reason }, 'cached model file is corrupt; deleting it and pulling it again'),
    });
    this.#residency = new Residency({
      engines: this.#engines, devices: () => this.#devices, cache: this.#cache, log: log.child({ part: 'residency' }),
      events: {
        loaded: (model) => this.#link.send({ type: 'loaded', model: model.model, digest: model.digest, device: model.device, memoryMB: model.memoryMB }),
        unloaded: (model) => this.#link.send({ type: 'unloaded', ...model }),
      },
    });
    this.#link = new AgentLink({
      url: options.url, grant: options.grant, log: log.child({ part: 'link' }),
      hello: () => this.#hello(),
      onWelcome: (welcome) => this.#onWelcome(welcome.heartbeatMs),
      onMessage: (message) => this.#onMessage(message),
      onRejected: (reason) => {
        log.error({ reason }, 'the orchestrator refused this agent');
        this.#rejected?.(reason);
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
    return new Agent(options, devices, log);
  }

  /** Dial the orchestrator. `onRejected` is called if it refuses this agent for good. */
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

  /** Live engine processes (0 when scaled to zero). */
  get engineProcesses(): number {
    return this.#supervisor.count;
  }

  async close(): Promise<void> {
    this.#stopHeartbeat();
    if (this.#idleSweep) clearInterval(this.#idleSweep);
    this.#link.close();
    for (const engine of this.#engines.values()) await engine.close();
    await this.#supervisor.stopAll();
  }

  #hello(): Extract<AgentMessage, { type: 'hello' }> {
    return {
      type: 'hello', protocol: LINK_PROTOCOL_VERSION, host: this.#options.host, classes: this.#options.classes,
      devices: this.#deviceReport(), engines: [...this.#engines.keys()], models: this.#cache.cached,
      inFlight: [...this.#running.values()].flatMap((batch) => [...batch.jobIds].map((jobId) => ({ jobId, batchId: batch.id }))),
      concurrency: this.#options.concurrency, version: VERSION,
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
      type: 'heartbeat', inFlight: this.#running.size, resident: this.#residency.resident(), devices: this.#deviceReport(),
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
        void this.#run(message);
        return;
      case 'cancel':
        for (const batch of this.#running.values()) if (batch.jobIds.has(message.jobId)) batch.cancel([message.jobId]);
        return;
      case 'ack':
        for (const jobId of message.jobIds) this.#unacked.delete(jobId);
        return;
      case 'welcome':
        return;
    }
  }

  #report(result: Result): void {
    this.#unacked.set(result.jobId, result);
    this.#link.send(result);
  }

  async #run(message: Run): Promise<void> {
    const received = performance.now();
    const jobs = message.jobs;
    const batch: RunningBatch = {
      id: message.batchId, jobIds: new Set(jobs.map((job) => job.id)), cancelled: new Set(),
      cancel: (jobIds) => { for (const jobId of jobIds) batch.cancelled.add(jobId); },
    };
    this.#running.set(batch.id, batch);
    this.#log.debug({ batchId: batch.id, model: message.model.name, jobs: jobs.length }, 'batch received');
    let acquired: LoadedModel | null = null;
    try {
      const { loaded, loadMs } = await this.#residency.acquire(message.model);
      acquired = loaded;
      this.#log.debug({ batchId: batch.id, loadMs }, 'model resident');
      batch.cancel = (jobIds) => {
        for (const jobId of jobIds) batch.cancelled.add(jobId);
        loaded.cancel(jobIds);
      };
      if (batch.cancelled.size > 0) loaded.cancel([...batch.cancelled]);
      this.#link.send({ type: 'started', batchId: batch.id, jobIds: [...batch.jobIds] });
      const computeStart = performance.now();
      const { outputs, memory } = await loaded.run(
        jobs.map((job) => ({ id: job.id, input: job.input })),
        (progress) => this.#link.send({ type: 'progress', batchId: batch.id, jobIds: jobs.map((job) => job.id).filter((id) => !batch.cancelled.has(id)), ...progress }),
      );
      const computeMs = performance.now() - computeStart;
      // Jobs of one batch share their shape, so the first job's pixels are every job's.
      const pixels = pixelsOf(jobs[0]?.input ?? {});
      const measured: BatchMemoryReport = { ...this.#residency.recordBatch(loaded, pixels * jobs.length, memory), pixels, batchSize: jobs.length };
      this.#log.info({ batchId: batch.id, model: message.model.name, jobs: jobs.length, pixels, computeMs: Math.round(computeMs), memory }, 'batch computed');
      if (memory && memory.peakMB > loaded.device.budgetMB) {
        this.#log.warn({ batchId: batch.id, peakMB: memory.peakMB, budgetMB: loaded.device.budgetMB }, 'the batch took more than the device budget');
      }
      await Promise.all(outputs.map((output, index) => this.#deliver(message, jobs[index]!, output, { loadMs, computeMs, received }, memory ? measured : undefined)));
    } catch (error) {
      const engineError = error instanceof EngineError ? error : new EngineError('ENGINE_FAILED', (error as Error).message);
      this.#log.warn({ batchId: batch.id, code: engineError.code, err: error }, 'batch failed');
      for (const job of jobs) {
        this.#report({
          type: 'failed', jobId: job.id, batchId: batch.id, retryable: engineError.retryable,
          error: { code: engineError.code, message: engineError.message },
        });
      }
    } finally {
      if (acquired) this.#residency.release(acquired);
      this.#running.delete(batch.id);
    }
  }

  async #deliver(
    message: Run, job: Run['jobs'][number], output: JobOutput, timing: { loadMs: number; computeMs: number; received: number }, memory: BatchMemoryReport | undefined,
  ): Promise<void> {
    if (!output.ok) {
      this.#report({ type: 'failed', jobId: job.id, batchId: message.batchId, retryable: output.retryable, error: { code: output.code, message: output.message } });
      return;
    }
    try {
      const artifacts = [];
      for (const file of output.files) {
        const uploaded = await uploadOutput(this.#options.url, job.id, job.uploadGrant, file);
        artifacts.push({ ...uploaded, mediaType: file.mediaType, width: file.width, height: file.height });
      }
      this.#report({
        type: 'done', jobId: job.id, batchId: message.batchId, artifacts, result: output.result,
        timings: { loadMs: timing.loadMs, computeMs: timing.computeMs, totalMs: performance.now() - timing.received },
        ...(memory ? { memory } : {}),
      });
    } catch (error) {
      const engineError = error instanceof EngineError ? error : new EngineError('ENGINE_FAILED', (error as Error).message);
      this.#report({ type: 'failed', jobId: job.id, batchId: message.batchId, retryable: engineError.retryable, error: { code: engineError.code, message: engineError.message } });
    }
  }
}
