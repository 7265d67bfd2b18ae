import type { ErrorCode, ModelManifest } from '../../../protocol/index.js';
import type { BatchMemory, EngineJob, JobOutput } from '../../core/engine.js';
import type { OnnxPipeline } from '../../../protocol/engines/onnx.js';
import type { OnnxProvider } from './providers.js';

/**
 * The whole vocabulary between the agent and its ONNX worker process (Node IPC
 * with structured-clone serialization, so tensors and PNG bytes cross as typed arrays).
 */
export type ToWorker =
  /** `files`: a model of several files, each member's local path by name (its digest is in `manifest.files`). */
  | { type: 'load'; requestId: number; manifest: ModelManifest; pipeline: OnnxPipeline; spinning: boolean; threads?: number; modelPath: string; files?: Record<string, string>; provider: OnnxProvider; deviceIndex: number }
  | { type: 'run'; requestId: number; model: string; jobs: EngineJob[] }
  | { type: 'cancel'; jobIds: string[] }
  /** The agent took `count` more frames of a run off the worker's hands (a clip's frames flow under a window of credits). */
  | { type: 'frames-taken'; requestId: number; count: number }
  | { type: 'unload'; requestId: number; model: string };

export type FromWorker =
  | { type: 'ready'; pid: number }
  | { type: 'loaded'; requestId: number; memoryMB: number; provider: string }
  | { type: 'progress'; requestId: number; step: number; total: number; previews?: { jobId: string; png: Uint8Array }[] }
  /** One frame of a clip (`cppn-video`), row-major RGB, in order; the agent pipes it to the clip's encoder. */
  | { type: 'frame'; requestId: number; jobId: string; index: number; rgb: Uint8Array }
  /** `progress`: the run's last step, which rides with its result instead of a message of its own. */
  | { type: 'result'; requestId: number; outputs: JobOutput[]; memory: BatchMemory; progress?: { step: number; total: number } }
  | { type: 'unloaded'; requestId: number }
  | { type: 'error'; requestId: number; code: ErrorCode; message: string; retryable: boolean };
