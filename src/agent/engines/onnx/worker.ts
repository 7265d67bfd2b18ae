/**
 * The ONNX engine's worker process. It owns the onnxruntime sessions of one
 * device, so the agent can reap it (and all its memory) by ending the process.
 * It speaks only the messages in messages.ts.
 */
import * as ort from 'onnxruntime-node';
import type { InferenceSession } from 'onnxruntime-node';
import type { ModelManifest } from '../../../protocol/index.js';
import { EngineError } from '../engine.js';
import type { FromWorker, ToWorker } from './messages.js';
import { PIPELINES } from './pipelines.js';

const sessions = new Map<string, { session: InferenceSession; manifest: ModelManifest }>();
const cancelled = new Set<string>();

const send = (message: FromWorker): void => {
  process.send!(message);
};

const rssMB = (): number => process.memoryUsage.rss() / (1024 * 1024);

async function load(message: Extract<ToWorker, { type: 'load' }>): Promise<void> {
  const before = rssMB();
  const options: InferenceSession.SessionOptions = { graphOptimizationLevel: 'all' };
  let provider = 'cpu';
  let session: InferenceSession;
  if (message.provider === 'cuda') {
    try {
      session = await ort.InferenceSession.create(message.modelPath, {
        ...options, executionProviders: [{ name: 'cuda', deviceId: message.deviceIndex }, 'cpu'],
      });
      provider = 'cuda';
    } catch (error) {
      // The CUDA provider ships separately from onnxruntime-node's CPU build; fall back rather than refuse.
      process.stderr.write(`onnx worker: CUDA provider unavailable (${(error as Error).message}); using the CPU\n`);
      session = await ort.InferenceSession.create(message.modelPath, { ...options, executionProviders: ['cpu'] });
    }
  } else {
    session = await ort.InferenceSession.create(message.modelPath, { ...options, executionProviders: ['cpu'] });
  }
  sessions.set(message.manifest.name, { session, manifest: message.manifest });
  send({ type: 'loaded', requestId: message.requestId, memoryMB: Math.max(1, Math.round(rssMB() - before)), provider });
}

async function run(message: Extract<ToWorker, { type: 'run' }>): Promise<void> {
  const loaded = sessions.get(message.model);
  if (!loaded) throw new EngineError('ENGINE_FAILED', `model ${message.model} is not loaded in this worker`);
  const outputs = await PIPELINES[loaded.manifest.pipeline]({
    session: loaded.session,
    manifest: loaded.manifest,
    jobs: message.jobs,
    onProgress: (progress) => send({ type: 'progress', requestId: message.requestId, ...progress }),
    isCancelled: (jobId) => cancelled.has(jobId),
  });
  for (const job of message.jobs) cancelled.delete(job.id);
  send({ type: 'result', requestId: message.requestId, outputs });
}

async function unload(message: Extract<ToWorker, { type: 'unload' }>): Promise<void> {
  const loaded = sessions.get(message.model);
  sessions.delete(message.model);
  await loaded?.session.release();
  send({ type: 'unloaded', requestId: message.requestId });
}

process.on('message', (message: ToWorker) => {
  if (message.type === 'cancel') {
    for (const jobId of message.jobIds) cancelled.add(jobId);
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
});

// The agent is our only reason to live: if its IPC channel goes, so do we.
process.on('disconnect', () => process.exit(0));
send({ type: 'ready', pid: process.pid });
