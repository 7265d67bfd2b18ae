import type { Device, ErrorCode, ModelManifest, NodeCatalogue } from '../../protocol/index.js';

/**
 * A picture a job names by digest (`image`, `mask`, a workflow's `pictures`), fetched, verified and decoded by the
 * agent: row-major pixels, RGB for a picture, one channel (its alpha: 0 = repaint) for a mask, RGBA for a workflow's
 * (as stored); sized to the job's width × height when it names them, else as stored.
 */
export interface InputPicture {
  data: Uint8Array;
  width: number;
  height: number;
  channels: 1 | 3 | 4;
}

/** One job of a batch, as an engine sees it. */
export interface EngineJob {
  id: string;
  input: Record<string, unknown>;
  /** The pictures its input names, decoded, by field; absent when it names none. */
  pictures?: Readonly<Record<string, InputPicture>>;
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

/**
 * An output too large to hold in memory (a video): a file the engine wrote on the agent's disk and hashed,
 * streaming, once it was finished. The agent streams it to the orchestrator's upload route and then calls `discard`.
 */
export interface OutputOnDisk {
  path: string;
  size: number;
  /** 'sha256:<hex>' of the file. */
  digest: string;
  mediaType: string;
  width?: number;
  height?: number;
  /** Remove the file (and what the engine made with it) once it is delivered, or will not be. */
  discard(): Promise<void>;
}

/** What an engine produced for one job: files, a small JSON result, or an error that is this job's own. */
export type JobOutput =
  | { jobId: string; ok: true; files: OutputFile[]; onDisk?: OutputOnDisk[]; result?: unknown }
  | { jobId: string; ok: false; code: ErrorCode; message: string; retryable: boolean };

export interface Progress {
  step: number;
  total: number;
  /** Pictures of the work so far, for the jobs whose input asked for previews (`previews`), as PNG. */
  previews?: { jobId: string; png: Uint8Array }[];
}

/**
 * Memory a model used, measured by its engine (MB): on the CPU from the engine
 * process's resident set, on a GPU from the process's GPU memory (nvidia-smi).
 */
export interface BatchMemory {
  /** The most the model held at any moment of the batch, its resident memory included. */
  peakMB: number;
  /** What it holds now that the batch is over (an allocator arena may keep what the batch grew). */
  residentMB: number;
}

/** A batch's outputs (one per job, in order) and, where the engine can measure it, the memory it took. */
export interface BatchResult {
  outputs: JobOutput[];
  memory?: BatchMemory;
}

/**
 * How long the engine's own process took to come up for a load, when the load started one (ms): `spawnMs` from
 * asking for the process until it runs, `readyMs` from then until it is ready for work (a worker reported ready,
 * a server's readiness check passed).
 */
export interface EngineStartup {
  spawnMs: number;
  readyMs: number;
}

/** A model made resident on a device by an engine. */
export interface LoadedModel {
  readonly manifest: ModelManifest;
  readonly device: Device;
  /** Memory the model took when it loaded, measured (not the manifest's declared figure). */
  readonly memoryMB: number;
  /** What computes it where the engine chooses (the ONNX engine's execution provider: cpu, cuda, dml, coreml), for the log. */
  readonly accelerator?: string;
  /**
   * Settles, with a reason, if the process holding this model ends without
   * being asked to (a crash, an OOM kill, a stray signal). It never settles for
   * `unload` or `Engine.close`. The model is gone then: whoever holds it drops
   * it and loads it afresh when it is next needed. Every engine that runs models
   * in a process of its own (a worker, a server, a command) reports its death here.
   */
  readonly exited: Promise<string>;
  /** Run a batch, in one forward pass where the engine can. A dead process rejects with ENGINE_CRASHED. */
  run(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<BatchResult>;
  /** Stop work on these jobs where the engine can (between steps). */
  cancel(jobIds: readonly string[]): void;
  /** Give the memory back; the engine's process ends when its last model is unloaded. */
  unload(): Promise<void>;
  /**
   * Unload the model after it has been idle this long, instead of the agent's default (`--idle-unload`): a
   * server the agent started for it says how soon it may be stopped (scale to zero). Absent: the default.
   */
  readonly idleUnloadMs?: number | null;
  /** The process this load started, and how long it took (absent: the load reused a running process, or started none). */
  readonly startup?: EngineStartup;
  /**
   * The base URL of the HTTP server the model runs on (`http://127.0.0.1:8188`), read when needed (a server started
   * again may listen elsewhere): server engines' models have one, for the pass-through (agent/relay/). Absent: none.
   */
  serverUrl?(): string;
  /**
   * A model that runs clients' whole workflows (ComfyUI's `acceptWorkflows`): what its server offers them now (its
   * `/object_info`, trimmed), or null when it cannot say. Absent: the model runs no clients' workflows.
   */
  catalogue?(): Promise<NodeCatalogue | null>;
}

/**
 * An engine: loads models onto devices. One implementation per folder under
 * engines/, registered by name in engines/registry.ts.
 *
 * `load` must verify what it loads: the bytes it hands to the runtime hash to
 * `manifest.digest`, else it fails with INTEGRITY_FAILED (the agent then
 * deletes its cached copy and pulls it again). An engine that can only load by
 * path (a server given a file name) relies on the model cache's check instead.
 * `modelPath` is null for a model without a file (`manifest.file` false): a
 * server that loads its own weights, or a URL the person runs. A model of
 * several files (`manifest.files`) has `modelPath` at its index and `files`
 * giving each member's local path by name (each pulled and checked like a
 * model file; an engine that reads them hashes them against `manifest.files`).
 */
export interface Engine {
  readonly name: string;
  load(manifest: ModelManifest, modelPath: string | null, device: Device, files?: Readonly<Record<string, string>>): Promise<LoadedModel>;
  /**
   * For a model its host declares (by its settings there) and has not loaded: whether it runs clients' workflows on
   * this engine, and what its server offers them (null: not known, a server not running yet); undefined when these
   * settings are not such a model of this engine. Absent: the engine runs no clients' workflows.
   */
  describe?(settings: Readonly<Record<string, unknown>>): Promise<NodeCatalogue | null | undefined>;
  /** Stop everything the engine runs (agent shutdown); `exited` does not fire for it. */
  close(): Promise<void>;
}

/** An engine failure that carries one of the protocol's error codes. */
export class EngineError extends Error {
  override readonly name = 'EngineError';
  constructor(readonly code: ErrorCode, message: string, readonly retryable = true, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** `LoadedModel.exited` for a model whose engine runs no process of its own that could die under it. */
export const NEVER: Promise<string> = new Promise<string>(() => {});
