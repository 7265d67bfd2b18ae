/**
 * What the ONNX engine's worker does, wherever it runs: the onnxruntime sessions of one device, driven by the
 * messages in messages.ts. Its usual home is a worker process of its own (worker.ts), so the agent can reap it (and
 * all its memory) by ending the process; a model whose settings say `process: agent` has it in the agent's own
 * process instead (engine.ts says when that is worth it).
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { pipeline as streamInto } from 'node:stream/promises';
import * as ort from 'onnxruntime-node';
import type { InferenceSession } from 'onnxruntime-node';
import { pixelsOf, type ModelManifest } from '../../../protocol/index.js';
import { executionProviders, onGpu, type OnnxProvider } from './providers.js';
import { gpuMemoryMB, PeakMeter, rssMB, type PeakWindow } from '../../governance/process-memory.js';
import { EngineError, type BatchMemory } from '../../core/engine.js';
import type { FromWorker, ToWorker } from './messages.js';
import { PIPELINES, type ModelParts } from './pipelines.js';
import { isNetworkMember, type OnnxPipeline } from '../../../protocol/engines/onnx.js';
import { externalDataProblem, externalDataReferences, type ExternalDataReference } from '../../../protocol/engines/onnx-external-data.js';

interface Resident {
  session: InferenceSession;
  /** A model of several files: each member by name, an ONNX file as its session, any other as its bytes. */
  parts: ModelParts;
  manifest: ModelManifest;
  pipeline: OnnxPipeline;
  provider: OnnxProvider;
  /** What the model holds now (MB): its load, plus what its allocator arena kept from the batches so far. */
  residentMB: number;
  /** The largest batch so far, in pixels (or samples for tensors): only a larger one can grow what the model holds. */
  largestBatch: number;
  /**
   * The largest peak measured on this load (MB), a running maximum: what a batch no larger than `largestBatch` is
   * reported to take, unmeasured, and the least a larger one is reported to take.
   */
  largestPeakMB: number;
}

/**
 * Frames a run may have handed to the agent that the agent has not yet taken (piped to its encoder): the worker
 * renders ahead of the encoder by at most this many, so a slow encoder slows generation instead of frames piling
 * up in the agent's memory.
 */
const FRAME_WINDOW = 8;

/** Collect garbage before a measurement (the engine starts us with --expose-gc), so dead JS buffers do not count. */
const settle = (): void => (globalThis as { gc?: () => void }).gc?.();

/** The memory this process holds where the model lives: the GPU's figure for a CUDA session, the RSS otherwise. */
async function heldMB(provider: OnnxProvider): Promise<number> {
  if (onGpu(provider)) {
    const gpu = await gpuMemoryMB(process.pid);
    if (gpu !== null) return gpu;
  }
  return rssMB('self') ?? 0;
}

/**
 * The model's bytes, verified: the very buffer that was hashed is the one the
 * session is built from, so the file cannot change between the check and the use.
 */
/** A model of one file: it may name no external data (it has no other files to name). */
async function singleFileSession(message: Extract<ToWorker, { type: 'load' }>, threading: { spinning: boolean; threads?: number }): Promise<{ session: InferenceSession; provider: OnnxProvider }> {
  const bytes = await verifiedBytes(message.modelPath, message.manifest.digest);
  checkedExternalData(bytes, message.manifest, 'its file', new Set());
  return createSession(bytes, message.provider, message.deviceIndex, threading, null);
}

/** A file's bytes hashed as they stream, without holding them (a network's external data, which onnxruntime read). */
async function verifiedFile(path: string, digest: string): Promise<void> {
  const hash = createHash('sha256');
  try {
    await streamInto(createReadStream(path), hash);
  } catch (error) {
    throw new EngineError('INTEGRITY_FAILED', `cannot read model file ${path}: ${(error as Error).message}`, true, { cause: error });
  }
  const actual = `sha256:${hash.digest('hex')}`;
  if (actual !== digest) throw new EngineError('INTEGRITY_FAILED', `model file ${path} hashes to ${actual}, not ${digest}`);
}

async function verifiedBytes(path: string, digest: string): Promise<Uint8Array> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (error) {
    throw new EngineError('INTEGRITY_FAILED', `cannot read model file ${path}: ${(error as Error).message}`, true, { cause: error });
  }
  const actual = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  if (actual !== digest) {
    throw new EngineError('INTEGRITY_FAILED', `model file ${path} (${bytes.length} bytes) hashes to ${actual}, not ${digest}`);
  }
  return bytes;
}

/**
 * A session of a network's bytes. `externalDataFolder`: the folder its checked external data lies in (the model's
 * own), which onnxruntime then resolves locations against instead of the process's working directory; null for a
 * network that names none (checkedExternalData refused any other).
 */
async function createSession(
  bytes: Uint8Array, provider: OnnxProvider, deviceIndex: number, threading: { spinning: boolean; threads?: number }, externalDataFolder: string | null,
): Promise<{ session: InferenceSession; provider: OnnxProvider }> {
  const spin = threading.spinning ? '1' : '0';
  // The thread pools sleep when idle unless the model's settings say otherwise (OnnxSettings.spinning says why), and
  // have as many threads as the settings give (OnnxSettings.threads), else one per core.
  const options: InferenceSession.SessionOptions = {
    ...(threading.threads !== undefined ? { intraOpNumThreads: threading.threads } : {}),
    graphOptimizationLevel: 'all',
    extra: {
      session: {
        intra_op: { allow_spinning: spin }, inter_op: { allow_spinning: spin },
        ...(externalDataFolder ? { model_external_initializers_file_folder_path: externalDataFolder } : {}),
      },
    },
  };
  if (provider !== 'cpu') {
    try {
      const session = await ort.InferenceSession.create(bytes, { ...options, executionProviders: executionProviders(provider, deviceIndex) });
      return { session, provider };
    } catch (error) {
      // The provider is missing from this build or this machine (CUDA's libraries, a DirectX 12 GPU); fall back rather than refuse.
      process.stderr.write(`onnx worker: the ${provider} provider is not available here (${(error as Error).message.split('\n')[0]}); using the CPU\n`);
    }
  }
  return { session: await ort.InferenceSession.create(bytes, { ...options, executionProviders: ['cpu'] }), provider: 'cpu' };
}

/**
 * The members of a model of several files, each verified against its digest in the manifest: a network becomes a
 * session, a data file one of its networks names as external data is left to onnxruntime to open (from the model's
 * own folder, where every member lies under its name: Residency pulls them there), anything else stays bytes (a
 * dictionary). The model's `session` is its first network by name, for the pipelines that run one.
 */
async function loadParts(
  files: Record<string, string>, manifest: ModelManifest, pipeline: OnnxPipeline, provider: OnnxProvider, deviceIndex: number, threading: { spinning: boolean; threads?: number },
): Promise<{ session: InferenceSession; provider: OnnxProvider; parts: ModelParts }> {
  const parts: Record<string, InferenceSession | Uint8Array> = {};
  let first: { session: InferenceSession; provider: OnnxProvider } | null = null;
  const names = Object.keys(files).sort();
  const external = new Set<string>();
  try {
    for (const name of names.filter((member) => isNetworkMember(member, pipeline))) {
      const bytes = await verifiedBytes(files[name]!, digestOf(manifest, name));
      const references = checkedExternalData(bytes, manifest, name, new Set(names.filter((member) => member !== name)));
      for (const reference of references) external.add(reference.location);
      const built = await createSession(bytes, provider, deviceIndex, threading, references.length > 0 ? dirname(files[name]!) : null);
      parts[name] = built.session;
      first ??= built;
    }
    for (const name of names.filter((member) => !isNetworkMember(member, pipeline))) {
      // onnxruntime read it already; its bytes are checked without holding them twice.
      if (external.has(name)) await verifiedFile(files[name]!, digestOf(manifest, name));
      else parts[name] = await verifiedBytes(files[name]!, digestOf(manifest, name));
    }
  } catch (error) {
    await Promise.all(Object.values(parts).map((part) => (part instanceof Uint8Array ? null : part.release())));
    throw error;
  }
  if (!first) throw new EngineError('ENGINE_FAILED', `model ${manifest.name} holds no ONNX file (${Object.keys(files).join(', ')})`, false);
  return { ...first, parts };
}

function digestOf(manifest: ModelManifest, name: string): string {
  const member = manifest.files?.[name];
  if (!member) throw new EngineError('ENGINE_FAILED', `model ${manifest.name} has no file named ${name}`, false);
  return member.digest;
}

/**
 * What a network's external data names, refused unless each is a file of the model's own (`members`): the check the
 * orchestrator makes at `models add`, again here, for a model that reached this host another way. Without it
 * onnxruntime would open whatever relative path the file names, from the worker's folder.
 */
function checkedExternalData(bytes: Uint8Array, manifest: ModelManifest, name: string, members: ReadonlySet<string>): ExternalDataReference[] {
  let references: ExternalDataReference[];
  try {
    references = externalDataReferences(bytes);
  } catch (error) {
    throw new EngineError('ENGINE_FAILED', `model ${manifest.name}: ${name} is not an ONNX model (${(error as Error).message})`, false, { cause: error });
  }
  const problem = externalDataProblem(references, members, name);
  if (problem) throw new EngineError('ENGINE_FAILED', `model ${manifest.name} refused: ${name}: ${problem}`, false);
  return references;
}

/** The worker's state and its handling of one message; `send` carries its answers back to the engine. */
export function workerCore(send: (message: FromWorker) => void): { receive(message: ToWorker): void; close(): Promise<void> } {
  const sessions = new Map<string, Resident>();
  const frameCredits = new Map<number, { credits: number; waiting: Array<() => void> }>();
  const cancelled = new Set<string>();
  const peaks = new PeakMeter('self');

  async function load(message: Extract<ToWorker, { type: 'load' }>): Promise<void> {
    settle();
    const beforeRss = rssMB('self') ?? 0;
    const beforeGpu = onGpu(message.provider) ? (await gpuMemoryMB(process.pid)) ?? 0 : 0;
    const threading = { spinning: message.spinning, threads: message.threads };
    const built = message.files
      ? await loadParts(message.files, message.manifest, message.pipeline, message.provider, message.deviceIndex, threading)
      : { ...(await singleFileSession(message, threading)), parts: {} };
    const { session, provider, parts } = built;
    settle(); // the file's buffer is garbage now; it is not the model's memory
    const residentMB = Math.max(1, Math.round((await heldMB(provider)) - (onGpu(provider) ? beforeGpu : beforeRss)));
    sessions.set(message.manifest.name, { session, parts, manifest: message.manifest, pipeline: message.pipeline, provider, residentMB, largestBatch: 0, largestPeakMB: residentMB });
    send({ type: 'loaded', requestId: message.requestId, memoryMB: residentMB, provider });
  }

  async function run(message: Extract<ToWorker, { type: 'run' }>): Promise<void> {
    const loaded = sessions.get(message.model);
    if (!loaded) throw new EngineError('ENGINE_FAILED', `model ${message.model} is not loaded in this worker`);
    // Only a batch larger than any before can grow what the model holds, so only then is memory measured (a full GC
    // before and after, the kernel's peak mark, nvidia-smi twice on a GPU: milliseconds). A batch no larger runs in
    // the memory the largest one left, and is reported at that one's peak: measuring it would cost every small job
    // several /proc reads (or two nvidia-smi runs) on its way back, for a figure nobody uses (Residency.recordBatch).
    const size = message.jobs.reduce((sum, job) => sum + Math.max(1, pixelsOf(job.input)), 0);
    const previousLargest = loaded.largestBatch;
    const largest = size > previousLargest;
    if (largest) {
      loaded.largestBatch = size;
      settle();
    }
    const gpuBefore = largest && onGpu(loaded.provider) ? await heldMB(loaded.provider) : 0;
    const closeWindow = largest ? peaks.open() : null;
    const measure = async (whole: boolean): Promise<BatchMemory> => {
      settle();
      const memory = await measuredMemory(loaded, closeWindow!(), gpuBefore);
      // A batch that failed, or that a cancel stopped, did only part of its work: what it took counts, but its size is
      // not taken as measured, or the next batch of that size would be reported at this part's peak (a batch cancelled
      // before its first step peaks at about the model's load figure).
      if (!whole && loaded.largestBatch === size) loaded.largestBatch = previousLargest;
      return memory;
    };
    // The last step's progress waits for the result and travels with it: a message of its own would wake the agent
    // once more for nothing its caller sees sooner (the result follows at once, or after the PNG encoding).
    let lastStep: { step: number; total: number } | undefined;
    const outputs = await PIPELINES[loaded.pipeline]({
      session: loaded.session,
      parts: loaded.parts,
      manifest: loaded.manifest,
      jobs: message.jobs,
      onProgress: (progress) => {
        if (closeWindow) peaks.sample();
        if (progress.step >= progress.total) lastStep = progress;
        else send({ type: 'progress', requestId: message.requestId, ...progress });
      },
      isCancelled: (jobId) => cancelled.has(jobId),
      emitFrame: async (jobId, index, rgb) => {
        let window = frameCredits.get(message.requestId);
        if (!window) frameCredits.set(message.requestId, (window = { credits: FRAME_WINDOW, waiting: [] }));
        while (window.credits <= 0 && !cancelled.has(jobId)) await new Promise<void>((resolve) => window.waiting.push(resolve));
        window.credits--;
        send({ type: 'frame', requestId: message.requestId, jobId, index, rgb });
      },
    }).catch(async (error: unknown) => {
      if (closeWindow) await measure(false); // its window must close too: the kernel's mark is reset only while none is open
      throw error;
    }).finally(() => frameCredits.delete(message.requestId));
    for (const job of message.jobs) cancelled.delete(job.id);
    let memory: BatchMemory = { peakMB: loaded.largestPeakMB, residentMB: Math.round(loaded.residentMB) };
    if (closeWindow) memory = await measure(outputs.every((output) => output.ok || output.code !== 'CANCELLED'));
    send({ type: 'result', requestId: message.requestId, outputs, memory, ...(lastStep ? { progress: lastStep } : {}) });
  }

  /**
   * What the largest batch so far took, attributed to its model: the model's
   * memory before the batch plus what the process grew by. On a GPU the CUDA
   * allocator keeps what it grew, so the figure after the batch is its peak; on
   * the CPU the kernel's high-water mark gives the peak (see PeakMeter). The
   * peak is never reported below one measured before on this load: this batch
   * is larger than those, and "what it held before" is itself a sum of samples
   * taken between batches, which memory released or taken meanwhile can bend.
   */
  async function measuredMemory(loaded: Resident, window: PeakWindow, gpuBefore: number): Promise<BatchMemory> {
    let grewMB: number;
    let keptMB: number;
    if (onGpu(loaded.provider)) {
      keptMB = Math.max(0, (await heldMB(loaded.provider)) - gpuBefore);
      grewMB = keptMB;
    } else {
      grewMB = Math.max(0, window.peakMB - window.startMB);
      // onnxruntime's CPU arena keeps the buffers a batch grew until the session is released.
      keptMB = Math.max(0, window.endMB - window.startMB);
    }
    const peakMB = Math.max(loaded.largestPeakMB, Math.round(loaded.residentMB + grewMB));
    loaded.residentMB += keptMB;
    loaded.largestPeakMB = peakMB;
    return { peakMB, residentMB: Math.round(loaded.residentMB) };
  }

  async function unload(message: Extract<ToWorker, { type: 'unload' }>, answer = true): Promise<void> {
    const loaded = sessions.get(message.model);
    sessions.delete(message.model);
    // A model of several files holds its main session among its parts.
    const held = new Set<InferenceSession>(loaded ? [loaded.session, ...Object.values(loaded.parts).filter((part): part is InferenceSession => !(part instanceof Uint8Array))] : []);
    await Promise.all([...held].map((session) => session.release()));
    if (answer) send({ type: 'unloaded', requestId: message.requestId });
  }


  function receive(message: ToWorker): void {
    if (message.type === 'cancel') {
      for (const jobId of message.jobIds) cancelled.add(jobId);
      // A clip waiting for the encoder's room stops waiting: its loop sees the cancel and ends.
      for (const window of frameCredits.values()) window.waiting.splice(0).forEach((wake) => wake());
      return;
    }
    if (message.type === 'frames-taken') {
      const window = frameCredits.get(message.requestId);
      if (window) {
        window.credits += message.count;
        window.waiting.splice(0).forEach((wake) => wake());
      }
      return;
    }
    const handler = message.type === 'load' ? load(message) : message.type === 'run' ? run(message) : unload(message);
    handler.catch((error: unknown) => {
      const engineError = error instanceof EngineError ? error : null;
      send({
        type: 'error', requestId: message.requestId,
        code: engineError?.code ?? 'ENGINE_FAILED',
        message: error instanceof Error ? error.message : String(error),
        retryable: engineError?.retryable ?? true,
      });
    });
  }

  /** Release every session (the in-process worker's end; a worker process just exits). */
  async function close(): Promise<void> {
    await Promise.all([...sessions.keys()].map((model) => unload({ type: 'unload', requestId: 0, model }, false)));
  }

  return { receive, close };
}
