import type { ModelManifest, OrchestratorMessage } from '../../protocol/index.js';

type Run = Extract<OrchestratorMessage, { type: 'run' }>;

/** Mints the credential a batch's outputs are uploaded with (auth/upload-credentials.ts), valid until the given time. */
export type MintUploadCredential = (batchId: string, validUntil: number) => string;

/**
 * The `run` message that sends a batch — or a health probe, which is a batch of one the agent runs the same way — to a
 * host: one builder, so a batch and a probe carry the same fields made the same way. `validUntil`: until when the
 * batch's outputs may be uploaded.
 */
export function runMessage(
  batch: { batchId: string; model: ModelManifest; jobs: Run['jobs']; validUntil: number; probe?: boolean },
  mintUploadCredential: MintUploadCredential,
): Run {
  return {
    type: 'run', batchId: batch.batchId, model: batch.model, ...(batch.probe ? { probe: true } : {}),
    uploadCredential: mintUploadCredential(batch.batchId, batch.validUntil), jobs: batch.jobs,
  };
}
