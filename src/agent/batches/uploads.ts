import { createReadStream } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { sha256Digest } from '../../protocol/index.js';
import type { ServerTrust } from '../../tls-client/index.js';
import { EngineError, type OutputFile, type OutputOnDisk } from '../core/engine.js';

const ATTEMPTS = 6;

/** The orchestrator an output goes to: asked at each try, since a failover may have linked the agent to another. */
export interface UploadTarget {
  url: string;
  trust: ServerTrust;
}

/** A body to send: bytes in memory, or a file streamed from disk (opened afresh for every attempt). */
type Body = { bytes: Uint8Array } | { path: string; size: number };

function put(url: URL, agent: http.Agent, headers: Record<string, string>, body: Body): Promise<{ status: number; text: string }> {
  const transport = url.protocol === 'https:' ? https : http;
  const length = 'bytes' in body ? body.bytes.length : body.size;
  return new Promise((resolve, reject) => {
    const request = transport.request(url, {
      method: 'PUT', agent, headers: { ...headers, 'content-length': String(length) },
    }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, text }));
      response.on('error', reject);
    });
    request.on('error', reject);
    if ('bytes' in body) request.end(body.bytes);
    // The file goes in chunks, at the pace the connection takes them: a clip is never held in memory whole.
    else pipeline(createReadStream(body.path), request).catch(reject);
  });
}

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
  return send(target, jobId, credential, sha256Digest(file.bytes), file.mediaType, { bytes: file.bytes });
}

/** Upload an output the engine left on disk (a video), streamed from the file; the engine hashed it (streaming too) once it was finished. */
export async function uploadFileOutput(target: () => UploadTarget, jobId: string, credential: string, file: OutputOnDisk): Promise<{ digest: string; bytes: number }> {
  return send(target, jobId, credential, file.digest, file.mediaType, { path: file.path, size: file.size });
}

async function send(target: () => UploadTarget, jobId: string, credential: string, digest: string, mediaType: string, body: Body): Promise<{ digest: string; bytes: number }> {
  const bytes = 'bytes' in body ? body.bytes.length : body.size;
  let lastError = '';
  let storeAway = false;
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    if (attempt > 0) await sleep(Math.min(5000, 200 * 2 ** attempt));
    const { url: baseUrl, trust } = target();
    const url = new URL(`/v1/jobs/${encodeURIComponent(jobId)}/outputs/${digest}`, baseUrl);
    try {
      const response = await put(url, await trust.agent(), { authorization: `Bearer ${credential}`, 'content-type': mediaType }, body);
      if (response.status >= 200 && response.status < 300) return { digest, bytes };
      lastError = `HTTP ${response.status}: ${response.text.slice(0, 300)}`;
      storeAway = response.status === 503 && response.text.includes('BLOB_STORE_UNAVAILABLE');
      if (response.status < 500) break;
    } catch (error) {
      lastError = trust.explain(error) ?? (error as Error).message;
    }
  }
  // The orchestrator's blob store being away (a bucket outage) is not this host's fault: said so, it does not count
  // against the replica's breaker, and the job is retried.
  throw new EngineError(storeAway ? 'BLOB_STORE_UNAVAILABLE' : 'ENGINE_FAILED', `uploading an output of ${jobId} failed: ${lastError}`, true);
}
