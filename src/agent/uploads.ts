import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { EngineError, type OutputFile } from './engines/engine.js';

const ATTEMPTS = 6;

/**
 * Upload one output under its job's upload grant. The digest is computed here
 * and named in the URL; the orchestrator recomputes it while storing and
 * refuses a mismatch. Network failures and 5xx are retried with backoff,
 * because an orchestrator restart should not cost a finished result.
 */
export async function uploadOutput(baseUrl: string, jobId: string, grant: string, file: OutputFile): Promise<{ digest: string; bytes: number }> {
  const digest = `sha256:${createHash('sha256').update(file.bytes).digest('hex')}`;
  const url = new URL(`/v1/jobs/${encodeURIComponent(jobId)}/outputs/${digest}`, baseUrl);
  let lastError = '';
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    if (attempt > 0) await sleep(Math.min(5000, 200 * 2 ** attempt));
    try {
      const response = await fetch(url, {
        method: 'PUT',
        headers: { authorization: `Bearer ${grant}`, 'content-type': file.mediaType },
        body: file.bytes as Uint8Array<ArrayBuffer>,
      });
      if (response.ok) return { digest, bytes: file.bytes.length };
      const text = await response.text();
      lastError = `HTTP ${response.status}: ${text.slice(0, 300)}`;
      if (response.status < 500) break;
    } catch (error) {
      lastError = (error as Error).message;
    }
  }
  throw new EngineError('ENGINE_FAILED', `uploading an output of ${jobId} failed: ${lastError}`, true);
}
