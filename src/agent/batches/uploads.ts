import { retrying } from '../../net/http-client.js';
import { workClock } from '../../protocol/clock.js';
import { sha256Digest } from '../../protocol/index.js';
import type { ServerTrust } from '../../tls-client/index.js';
import { EngineError, type OutputFile, type OutputOnDisk } from '../core/engine.js';

/** Tries of one upload: the first and five more, 400 ms apart growing to 5 s (some 11 s in all, a restart's worth). */
const RETRIES = 5;
const BACKOFF = { initialMs: 400, maxMs: 5000 };

/** The orchestrator an output goes to: asked at each try, since a failover may have linked the agent to another. */
export interface UploadTarget {
  url: string;
  trust: ServerTrust;
}

/** A body to send: bytes in memory, or a file streamed from disk (opened afresh for every attempt). */
type Body = Uint8Array | { path: string; size: number };

/**
 * Upload one output of a job with its batch's upload credential. The digest is computed here
 * and named in the URL; the orchestrator recomputes it while storing and
 * refuses a mismatch. Network failures and 5xx are retried with backoff,
 * because an orchestrator restart — or a standby taking over, where `target()` then
 * names the new one — should not cost a finished result.
 * Connections come from the trust's keep-alive agent (with the pinned CA on
 * a TLS mesh): a fresh handshake per output would dominate small jobs.
 */
export async function uploadOutput(target: () => UploadTarget, jobId: string, credential: string, file: OutputFile): Promise<{ digest: string; bytes: number }> {
  return send(target, jobId, credential, sha256Digest(file.bytes), file.mediaType, file.bytes);
}

/** Upload an output the engine left on disk (a video), streamed from the file; the engine hashed it (streaming too) once it was finished. */
export async function uploadFileOutput(target: () => UploadTarget, jobId: string, credential: string, file: OutputOnDisk): Promise<{ digest: string; bytes: number }> {
  return send(target, jobId, credential, file.digest, file.mediaType, { path: file.path, size: file.size });
}

async function send(target: () => UploadTarget, jobId: string, credential: string, digest: string, mediaType: string, body: Body): Promise<{ digest: string; bytes: number }> {
  const bytes = body instanceof Uint8Array ? body.length : body.size;
  const failed = (code: 'BLOB_STORE_UNAVAILABLE' | 'ENGINE_FAILED', why: string): EngineError =>
    new EngineError(code, `uploading an output of ${jobId} failed: ${why}`, true);
  return retrying<{ digest: string; bytes: number }>({ retries: RETRIES, backoff: BACKOFF, clock: workClock }, async () => {
    const { url: baseUrl, trust } = target();
    const url = new URL(`/v1/jobs/${encodeURIComponent(jobId)}/outputs/${digest}`, baseUrl);
    try {
      const answer = await trust.request(url, { method: 'PUT', headers: { authorization: `Bearer ${credential}`, 'content-type': mediaType }, body });
      if (answer.status >= 200 && answer.status < 300) return { value: { digest, bytes } };
      // The orchestrator's blob store being away (a bucket outage) is not this host's fault: said so, it does not
      // count against the replica's breaker, and the job is retried.
      const storeAway = answer.status === 503 && answer.text.includes('BLOB_STORE_UNAVAILABLE');
      return { failure: failed(storeAway ? 'BLOB_STORE_UNAVAILABLE' : 'ENGINE_FAILED', `HTTP ${answer.status}: ${answer.text.slice(0, 300)}`), retry: answer.status >= 500 };
    } catch (error) {
      return { failure: failed('ENGINE_FAILED', trust.explain(error) ?? (error as Error).message), retry: true };
    }
  });
}
