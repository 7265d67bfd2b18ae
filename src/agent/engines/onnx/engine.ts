import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import type { Supervisor } from '../../supervisor.js';
import { EngineError, type Engine, type EngineJob, type JobOutput, type LoadedModel, type Progress } from '../engine.js';
import type { FromWorker, ToWorker } from './messages.js';

/** The worker's entry: the compiled file, or — when running from the TypeScript sources (tests, benchmarks) — the source through tsx. */
function workerEntry(): { path: string; execArgv: string[] } {
  const compiled = fileURLToPath(new URL('./worker.js', import.meta.url));
  if (existsSync(compiled)) return { path: compiled, execArgv: [] };
  return { path: fileURLToPath(new URL('./worker.ts', import.meta.url)), execArgv: ['--import', 'tsx'] };
}

type Request = Extract<ToWorker, { requestId: number }>;
type WithoutId<T> = T extends unknown ? Omit<T, 'requestId'> : never;
type Reply = Extract<FromWorker, { type: 'loaded' | 'result' | 'unloaded' }>;

/** One worker process: requests are matched to replies by id; its death fails what it held. */
class Worker {
  readonly child: ChildProcess;
  readonly models = new Set<string>();
  readonly #pending = new Map<number, { resolve(reply: Reply): void; reject(error: Error): void; onProgress?(progress: Progress): void }>();
  #nextId = 1;
  #exit: string | null = null;

  /** `oom` says whether the kernel killed it for its cgroup's memory limit (an ENGINE_OOM error), at its exit. */
  constructor(child: ChildProcess, oom: () => EngineError | null = () => null) {
    this.child = child;
    child.on('message', (message: FromWorker) => this.#receive(message));
    child.once('exit', (code, signal) => {
      this.#exit = signal ? `signal ${signal}` : `exit code ${code}`;
      const error = oom() ?? new EngineError('ENGINE_CRASHED', `the onnx worker (pid ${child.pid}) ended: ${this.#exit}`);
      for (const pending of this.#pending.values()) pending.reject(error);
      this.#pending.clear();
    });
  }

  get alive(): boolean {
    return this.#exit === null;
  }

  request<T extends Reply>(message: WithoutId<Request>, onProgress?: (progress: Progress) => void): Promise<T> {
    if (this.#exit) return Promise.reject(new EngineError('ENGINE_CRASHED', `the onnx worker ended: ${this.#exit}`));
    const requestId = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(requestId, { resolve: resolve as (reply: Reply) => void, reject, onProgress });
      this.child.send({ ...message, requestId } as ToWorker);
    });
  }

  notify(message: Extract<ToWorker, { type: 'cancel' }>): void {
    if (this.alive) this.child.send(message);
  }

  #receive(message: FromWorker): void {
    if (message.type === 'ready') return;
    const pending = this.#pending.get(message.requestId);
    if (!pending) return;
    if (message.type === 'progress') return pending.onProgress?.({ step: message.step, total: message.total });
    this.#pending.delete(message.requestId);
    if (message.type === 'error') pending.reject(new EngineError(message.code, message.message, message.retryable));
    else pending.resolve(message);
  }
}

/**
 * The built-in ONNX Runtime engine. Each device gets one worker process
 * holding the sessions of the models resident there; batches run fused (one
 * session.run over the batch axis per step). The worker is reaped when its
 * last model is unloaded, so an idle device costs no process and no memory.
 */
export class OnnxEngine implements Engine {
  readonly name = 'onnx';
  readonly #supervisor: Supervisor;
  readonly #workers = new Map<string, Worker>();

  constructor(supervisor: Supervisor) {
    this.#supervisor = supervisor;
  }

  async load(manifest: ModelManifest, modelPath: string, device: Device): Promise<LoadedModel> {
    const worker = this.#workerFor(device);
    const provider = device.kind === 'gpu' ? 'cuda' : 'cpu';
    const deviceIndex = device.kind === 'gpu' ? Number(device.id.replace(/^gpu/, '')) || 0 : 0;
    const reply = await worker.request<Extract<Reply, { type: 'loaded' }>>({ type: 'load', manifest, modelPath, provider, deviceIndex });
    worker.models.add(manifest.name);
    let unloaded = false;
    return {
      manifest, device, memoryMB: reply.memoryMB,
      run: async (jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<JobOutput[]> => {
        const result = await worker.request<Extract<Reply, { type: 'result' }>>({ type: 'run', model: manifest.name, jobs: [...jobs] }, onProgress);
        return result.outputs;
      },
      cancel: (jobIds) => worker.notify({ type: 'cancel', jobIds: [...jobIds] }),
      unload: async () => {
        if (unloaded) return;
        unloaded = true;
        worker.models.delete(manifest.name);
        if (worker.models.size === 0) {
          this.#workers.delete(device.id);
          await this.#supervisor.stop(worker.child);
        } else if (worker.alive) {
          await worker.request({ type: 'unload', model: manifest.name });
        }
      },
    };
  }

  #workerFor(device: Device): Worker {
    const existing = this.#workers.get(device.id);
    if (existing?.alive) return existing;
    const entry = workerEntry();
    const child = this.#supervisor.fork(entry.path, { name: `onnx/${device.id}`, execArgv: entry.execArgv });
    const worker = new Worker(child, () => this.#supervisor.oomError(child));
    worker.child.once('exit', () => {
      if (this.#workers.get(device.id) === worker) this.#workers.delete(device.id);
    });
    this.#workers.set(device.id, worker);
    return worker;
  }

  async close(): Promise<void> {
    await Promise.all([...this.#workers.values()].map((worker) => this.#supervisor.stop(worker.child)));
    this.#workers.clear();
  }
}
