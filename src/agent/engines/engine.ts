import type { Device, ModelManifest } from '../../protocol/index.js';

/** One job of a batch, as an engine sees it. */
export interface EngineJob {
  id: string;
  input: Record<string, unknown>;
  /** When the job expires (epoch ms), if it has a deadline; engines that wait on a server stop waiting then. */
  deadlineAt?: number | null;
}

/** One output file of a job (uploaded by the agent as a blob). */
export interface OutputFile {
  bytes: Uint8Array;
  mediaType: string;
  width?: number;
  height?: number;
}

/** What an engine produced for one job: files, a small JSON result, or an error that is this job's own. */
export type JobOutput =
  | { jobId: string; ok: true; files: OutputFile[]; result?: unknown }
  | { jobId: string; ok: false; code: string; message: string; retryable: boolean };

export interface Progress {
  step: number;
  total: number;
}

/** A model made resident on a device by an engine. */
export interface LoadedModel {
  readonly manifest: ModelManifest;
  readonly device: Device;
  /** Memory the model really took, measured (RSS growth on the CPU, per-process use on a GPU). */
  readonly memoryMB: number;
  /** Run a batch, in one forward pass where the engine can; one output per job, in order. */
  run(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<JobOutput[]>;
  /** Stop work on these jobs where the engine can (between steps). */
  cancel(jobIds: readonly string[]): void;
  /** Give the memory back; the engine's process ends when its last model is unloaded. */
  unload(): Promise<void>;
}

/** An engine: loads models onto devices. One implementation per folder under engines/. */
export interface Engine {
  readonly name: string;
  load(manifest: ModelManifest, modelPath: string, device: Device): Promise<LoadedModel>;
  /** Stop everything the engine runs (agent shutdown). */
  close(): Promise<void>;
}

/** An engine failure that carries one of the protocol's error codes. */
export class EngineError extends Error {
  override readonly name = 'EngineError';
  constructor(readonly code: string, message: string, readonly retryable = true, options?: { cause?: unknown }) {
    super(message, options);
  }
}
