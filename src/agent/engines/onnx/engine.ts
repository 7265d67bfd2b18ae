import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import type { Supervisor } from '../../governance/supervisor.js';
import type { ClipEncoder } from '../../video/encoder.js';
import { EngineError, type BatchResult, type Engine, type EngineJob, type LoadedModel, type Progress } from '../../core/engine.js';
import { parseSettings } from '../kit/settings.js';
import type { FromWorker, ToWorker } from './messages.js';
import { OnnxSettings } from '../../../protocol/engines/onnx.js';
import { encodeClips, type FrameSink } from '../../video/clips.js';
import { workerCore } from './worker-core.js';
import { providerFor } from './providers.js';

/** The worker's entry: the compiled file, or — when running from the TypeScript sources (tests, benchmarks) — the source through tsx. */
export function onnxWorkerEntry(): { path: string; execArgv: string[] } {
  // --expose-gc: the worker collects garbage before it measures memory, so dead buffers are not charged to a model.
  const compiled = fileURLToPath(new URL('./worker.js', import.meta.url));
  if (existsSync(compiled)) return { path: compiled, execArgv: ['--expose-gc'] };
  // tsx by its resolved URL: the worker runs in an empty folder of its own, where a bare `tsx` resolves to nothing.
  return { path: fileURLToPath(new URL('./worker.ts', import.meta.url)), execArgv: ['--expose-gc', '--import', import.meta.resolve('tsx')] };
}

/**
 * The worker's environment. onnxruntime-node 1.30 carries Microsoft's 1DS
 * telemetry SDK on Linux, which leaves an empty /tmp/mat-debug-<pid>.log behind
 * for every process that creates a session (and keeps an offline event cache);
 * ORT_DISABLE_TELEMETRY=1, set before onnxruntime initializes, turns all of it off.
 * An operator who sets the variable themselves keeps their choice. The agent's
 * GPUMESH_* variables (its join grant, a database URL) stay with the agent: an
 * engine process has no use for them.
 */
export function workerEnv(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(base).filter(([key]) => !key.startsWith('GPUMESH_')));
  return { ...env, ORT_DISABLE_TELEMETRY: base.ORT_DISABLE_TELEMETRY ?? '1' };
}

type Request = Extract<ToWorker, { requestId: number }>;
type WithoutId<T> = T extends unknown ? Omit<T, 'requestId'> : never;
type Reply = Extract<FromWorker, { type: 'loaded' | 'result' | 'unloaded' }>;

/**
 * How the engine reaches a worker core: a worker process over Node IPC, or a core in the agent's own process. Either
 * way the same messages (messages.ts) in the same order; `exited` is told how the worker ended.
 */
interface WorkerPort {
  readonly pid: number | undefined;
  send(message: ToWorker): void;
  /** Listeners: every message from the core; the worker's start (the OS ran it); its end, with how. */
  listen(on: { message(message: FromWorker): void; spawned(): void; exited(how: string): void }): void;
  /** End it on purpose. */
  stop(): Promise<void>;
}

/** A worker process: its end is the process's exit (its cgroup's OOM kill reported as ENGINE_OOM by `oom`). */
function processPort(child: ChildProcess, supervisor: Supervisor): WorkerPort {
  return {
    pid: child.pid,
    send: (message) => child.send(message),
    listen(on) {
      child.once('spawn', on.spawned);
      child.on('message', on.message);
      child.once('exit', (code, signal) => on.exited(signal ? `signal ${signal}` : `exit code ${code}`));
    },
    stop: () => supervisor.stop(child),
  };
}

/**
 * A worker core in the agent's own process (OnnxSettings.process `agent`): messages are handed over as they are,
 * a turn of the event loop later as over IPC, except a clip's frames, which are copied (the core may reuse the buffer
 * for the next frame, which IPC's copy made safe). It ends only when stopped.
 */
function inProcessPort(): WorkerPort {
  let on: Parameters<WorkerPort['listen']>[0] | null = null;
  const core = workerCore((message) => {
    const delivered = message.type === 'frame' ? { ...message, rgb: message.rgb.slice() } : message;
    queueMicrotask(() => on?.message(delivered));
  });
  return {
    pid: process.pid,
    send: (message) => core.receive(message),
    listen(listeners) {
      on = listeners;
      queueMicrotask(() => {
        listeners.spawned();
        listeners.message({ type: 'ready', pid: process.pid });
      });
    },
    async stop() {
      await core.close();
      on?.exited('stopped');
    },
  };
}

/** One worker: requests are matched to replies by id; its end fails what it held. */
class Worker {
  readonly port: WorkerPort;
  readonly models = new Set<string>();
  /** Settles with the reason when the worker ends without the engine having asked it to. */
  readonly crashed: Promise<string>;
  readonly #pending = new Map<number, { resolve(reply: Reply): void; reject(error: Error): void; onProgress?(progress: Progress): void; onFrame?: FrameSink }>();
  /** When the worker was asked for, ran, and reported ready (performance.now(); null until then): its startup's phases. */
  readonly forkedAt: number;
  spawnedAt: number | null = null;
  readyAt: number | null = null;
  #nextId = 1;
  #exit: string | null = null;
  #stopping = false;
  readonly #ended: Array<() => void> = [];

  /** `oom` says whether the kernel killed it for its cgroup's memory limit (an ENGINE_OOM error), at its exit. */
  constructor(port: WorkerPort, forkedAt: number, oom: () => EngineError | null = () => null) {
    this.port = port;
    this.forkedAt = forkedAt;
    let crashed!: (reason: string) => void;
    this.crashed = new Promise((resolve) => (crashed = resolve));
    port.listen({
      // 'spawned' once the OS has started it; the core says 'ready' once Node and onnxruntime are up.
      spawned: () => (this.spawnedAt = performance.now()),
      message: (message) => this.#receive(message),
      exited: (how) => {
        this.#exit = how;
        const error = oom() ?? new EngineError('ENGINE_CRASHED', `the onnx worker (pid ${port.pid}) ended: ${how}`);
        for (const pending of this.#pending.values()) pending.reject(error);
        this.#pending.clear();
        if (!this.#stopping) crashed(`the onnx worker (pid ${port.pid}) ended: ${how}`);
        for (const ended of this.#ended.splice(0)) ended();
      },
    });
  }

  /** Call `listener` once the worker has ended, however. */
  onEnd(listener: () => void): void {
    this.#ended.push(listener);
  }

  get alive(): boolean {
    return this.#exit === null;
  }

  /** End the worker on purpose (its end is then not a crash). */
  async stop(): Promise<void> {
    this.#stopping = true;
    await this.port.stop();
  }

  request<T extends Reply>(message: WithoutId<Request>, onProgress?: (progress: Progress) => void, onFrame?: FrameSink): Promise<T> {
    if (this.#exit) return Promise.reject(new EngineError('ENGINE_CRASHED', `the onnx worker ended: ${this.#exit}`));
    const requestId = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(requestId, { resolve: resolve as (reply: Reply) => void, reject, onProgress, onFrame });
      this.port.send({ ...message, requestId } as ToWorker);
    });
  }

  notify(message: Extract<ToWorker, { type: 'cancel' | 'frames-taken' }>): void {
    if (this.alive) this.port.send(message);
  }

  #receive(message: FromWorker): void {
    if (message.type === 'ready') {
      this.readyAt = performance.now();
      return;
    }
    const pending = this.#pending.get(message.requestId);
    if (!pending) return;
    if (message.type === 'progress') return pending.onProgress?.({ step: message.step, total: message.total, ...(message.previews ? { previews: message.previews } : {}) });
    if (message.type === 'frame') {
      const taken = (): void => this.notify({ type: 'frames-taken', requestId: message.requestId, count: 1 });
      // A run that takes no frames still lets the worker go on (it would otherwise wait for room for ever).
      if (!pending.onFrame) return taken();
      return void pending.onFrame(message.jobId, message.index, message.rgb).finally(taken);
    }
    this.#pending.delete(message.requestId);
    if (message.type === 'error') return pending.reject(new EngineError(message.code, message.message, message.retryable));
    // The run's last step came with its result (worker.ts): reported first, as if it had come alone.
    if (message.type === 'result' && message.progress) pending.onProgress?.(message.progress);
    pending.resolve(message);
  }
}

/**
 * The built-in ONNX Runtime engine. Each device gets one worker process
 * holding the sessions of the models resident there (and, for models whose
 * settings say `process: agent`, a worker core in the agent's own process); batches run fused (one
 * session.run over the batch axis per step). The worker is reaped when its
 * last model is unloaded, so an idle device costs no process and no memory.
 * A worker that dies takes its models with it (`exited`); the next load on
 * that device starts a fresh one.
 */
export class OnnxEngine implements Engine {
  readonly name = 'onnx';
  readonly #supervisor: Supervisor;
  readonly #workers = new Map<string, Worker>();
  readonly #video: ClipEncoder | null;

  /** `video` encodes the clips of `cppn-video` models; without it they fail with a clear error. */
  constructor(supervisor: Supervisor, video: ClipEncoder | null = null) {
    this.#supervisor = supervisor;
    this.#video = video;
  }

  async load(manifest: ModelManifest, modelPath: string | null, device: Device, files?: Readonly<Record<string, string>>): Promise<LoadedModel> {
    const { pipeline, spinning, threads, process: where } = parseSettings(OnnxSettings, manifest, this.name);
    if (modelPath === null) throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" (onnx) has no file: the ONNX engine loads a model file`, false);
    const key = where === 'agent' ? `${device.id}/agent` : device.id;
    const fresh = !this.#workers.get(key)?.alive;
    const worker = this.#workerFor(key, where);
    const provider = providerFor(device, process.platform);
    const deviceIndex = device.kind === 'gpu' ? Number(device.id.replace(/^gpu/, '')) || 0 : 0;
    let reply: Extract<Reply, { type: 'loaded' }>;
    try {
      reply = await worker.request<Extract<Reply, { type: 'loaded' }>>({ type: 'load', manifest, pipeline, spinning, threads, modelPath, ...(files ? { files: { ...files } } : {}), provider, deviceIndex });
    } catch (error) {
      // A worker started for this load alone is not left running idle.
      if (worker.models.size === 0 && worker.alive) await this.#stop(key, worker);
      throw error;
    }
    worker.models.add(manifest.name);
    let unloaded = false;
    // A worker started for this load: its boot is the load's spawn and ready phases (the rest is the session build).
    const startup = fresh && worker.spawnedAt !== null && worker.readyAt !== null
      ? { spawnMs: worker.spawnedAt - worker.forkedAt, readyMs: worker.readyAt - worker.spawnedAt } : undefined;
    /** Clip batches running now: a cancel reaches their encoders as well as the worker. */
    const clipCancels = new Set<(jobIds: readonly string[]) => void>();
    return {
      manifest, device, memoryMB: reply.memoryMB, accelerator: reply.provider, ...(startup ? { startup } : {}),
      exited: new Promise<string>((resolve) => {
        void worker.crashed.then((reason) => {
          if (!unloaded) resolve(reason);
        });
      }),
      run: async (jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<BatchResult> => {
        if (pipeline === 'cppn-video') {
          // The worker renders the frames; ffmpeg, a governed process of the agent's own, encodes them as they come.
          let listener: ((jobIds: readonly string[]) => void) | null = null;
          try {
            return await encodeClips({
              jobs, encoder: this.#video, onProgress,
              cancel: (jobIds) => worker.notify({ type: 'cancel', jobIds: [...jobIds] }),
              onCancel: (registered) => clipCancels.add((listener = registered)),
              render: (onFrame) => worker.request<Extract<Reply, { type: 'result' }>>({ type: 'run', model: manifest.name, jobs: [...jobs] }, onProgress, onFrame),
            });
          } finally {
            if (listener) clipCancels.delete(listener);
          }
        }
        const result = await worker.request<Extract<Reply, { type: 'result' }>>({ type: 'run', model: manifest.name, jobs: [...jobs] }, onProgress);
        return { outputs: result.outputs, memory: result.memory };
      },
      cancel: (jobIds) => {
        worker.notify({ type: 'cancel', jobIds: [...jobIds] });
        for (const cancel of clipCancels) cancel(jobIds);
      },
      unload: async () => {
        if (unloaded) return;
        unloaded = true;
        worker.models.delete(manifest.name);
        if (worker.models.size === 0) await this.#stop(key, worker);
        else if (worker.alive) await worker.request({ type: 'unload', model: manifest.name });
      },
    };
  }

  /** The worker of a device (its key: the device, or the device's in-agent core), started if it is not running. */
  #workerFor(key: string, where: 'worker' | 'agent'): Worker {
    const existing = this.#workers.get(key);
    if (existing?.alive) return existing;
    const forkedAt = performance.now();
    let worker: Worker;
    if (where === 'agent') {
      worker = new Worker(inProcessPort(), forkedAt);
    } else {
      const entry = onnxWorkerEntry();
      const child = this.#supervisor.fork(entry.path, { name: `onnx/${key}`, execArgv: entry.execArgv, env: workerEnv() });
      worker = new Worker(processPort(child, this.#supervisor), forkedAt, () => this.#supervisor.oomError(child));
    }
    worker.onEnd(() => this.#forget(key, worker));
    this.#workers.set(key, worker);
    return worker;
  }

  /** Drop a worker from the device map — only if it is still the device's worker (a fresh one may have replaced it). */
  #forget(key: string, worker: Worker): void {
    if (this.#workers.get(key) === worker) this.#workers.delete(key);
  }

  async #stop(key: string, worker: Worker): Promise<void> {
    this.#forget(key, worker);
    await worker.stop();
  }

  async close(): Promise<void> {
    await Promise.all([...this.#workers.entries()].map(([key, worker]) => this.#stop(key, worker)));
  }
}
