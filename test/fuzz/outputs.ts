import { createHash } from 'node:crypto';
import { once } from 'node:events';
import fc from 'fast-check';
import WebSocket from 'ws';
import { narrowGrant } from '../../src/orchestrator/auth/index.js';
import { outputTypesOf } from '../../src/orchestrator/blobs/output-media.js';
import { LINK_PATH, LINK_PROTOCOL_VERSION, type OrchestratorMessage } from '../../src/protocol/index.js';
import type { Outcome } from './http.js';

/** Bytes of one kind; `is` is the media type they really are. */
const CONTENT: Record<string, { bytes: Buffer; is: string }> = {
  png: { bytes: Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8ffff3f0005fe02fea7356b810000000049454e44ae426082', 'hex'), is: 'image/png' },
  html: { bytes: Buffer.from('<!doctype html><script>fetch("/v1/grants",{headers:{authorization:"Bearer "+location.search}})</script>'), is: 'text/html' },
  svg: { bytes: Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'), is: 'image/svg+xml' },
  json: { bytes: Buffer.from('{"y":[1,2,3]}'), is: 'application/json' },
  text: { bytes: Buffer.from('a report, in words'), is: 'text/plain' },
  binary: { bytes: Buffer.from([0, 1, 2, 3, 0xff]), is: 'application/octet-stream' },
};
const DECLARED = ['image/png', 'image/jpeg', 'image/webp', 'text/html', 'image/svg+xml', 'application/json', 'text/plain', 'video/mp4', 'application/octet-stream', 'application/javascript'];

export interface OutputInput {
  content: string;
  declared: string;
}

/** An image job's output: bytes of one kind declared as any media type (HTML as a PNG, a PNG as HTML, …). */
export function outputInputs(): fc.Arbitrary<OutputInput> {
  return fc.record({ content: fc.constantFrom(...Object.keys(CONTENT)), declared: fc.constantFrom(...DECLARED) });
}

/**
 * Tried first on every run: one output the orchestrator must publish as declared and one it must publish only as
 * text. About one generated input in ten is acceptable, so fifteen generated ones alone publish nothing one run in five.
 */
export const OUTPUT_EXAMPLES: OutputInput[] = [{ content: 'png', declared: 'image/png' }, { content: 'html', declared: 'text/plain' }];

/** Content that is UTF-8 text without NUL bytes: acceptable as `text/plain` (served as a download, with nosniff). */
const TEXT = new Set(['text/plain', 'application/json', 'text/html', 'image/svg+xml']);

/** Whether the orchestrator must accept these bytes as an image job's output declared so. */
function acceptable({ content, declared }: OutputInput): boolean {
  if (!outputTypesOf('image').includes(declared)) return false;
  const is = CONTENT[content]!.is;
  return is === declared || (declared === 'text/plain' && TEXT.has(is));
}

/**
 * An agent that joined properly and answers every batch it is sent with the output of the input being run: the
 * orchestrator must publish it exactly when the bytes are what they claim and the type is an image job's, and fail
 * the job (INTEGRITY_FAILED, after its retries) otherwise. Whatever was published is checked by the session's
 * health check for how it is served.
 */
export class OutputsAgent {
  readonly host = 'fuzz-outputs';
  #socket: WebSocket | null = null;
  #current: OutputInput | null = null;
  /** The type each content was first published with: a digest keeps one media type, so another declaration is refused. */
  readonly #publishedAs = new Map<string, string>();

  constructor(readonly url: string, readonly admin: string, readonly agentGrant: () => Promise<string>) {}

  async #connect(): Promise<WebSocket> {
    if (this.#socket?.readyState === WebSocket.OPEN) return this.#socket;
    const url = new URL(LINK_PATH, this.url);
    url.protocol = 'ws:';
    const socket = new WebSocket(url, { headers: { authorization: `Bearer ${await this.agentGrant()}` } });
    socket.on('error', () => {});
    await once(socket, 'open');
    const devices = [{ id: 'gpu0', kind: 'gpu', name: 'fuzz', memoryTotalMB: 65536, budgetMB: 65536, usedMB: 0 }];
    socket.send(JSON.stringify({
      type: 'hello', protocol: LINK_PROTOCOL_VERSION, host: this.host, classes: ['image'], engines: ['onnx'], models: [], inFlight: [], concurrency: 1, version: 'fuzz', devices,
    }));
    await once(socket, 'message'); // welcome
    const heartbeat = setInterval(() => socket.readyState === WebSocket.OPEN && socket.send(JSON.stringify({ type: 'heartbeat', resident: [], devices })), 1000);
    socket.on('close', () => clearInterval(heartbeat));
    socket.on('message', (data) => {
      const message = JSON.parse(data.toString()) as OrchestratorMessage;
      if (message.type !== 'run') return;
      for (const job of message.jobs) {
        const input = this.#current ?? { content: 'png', declared: 'image/png' };
        const { bytes } = CONTENT[input.content]!;
        const artifacts = message.probe ? [] : [{
          digest: `sha256:${createHash('sha256').update(bytes).digest('hex')}`, mediaType: input.declared, bytes: bytes.length, inline: bytes.toString('base64'),
        }];
        socket.send(JSON.stringify({ type: 'done', jobId: job.id, batchId: message.batchId, artifacts, timings: { loadMs: 0, computeMs: 1, totalMs: 1 } }));
      }
    });
    this.#socket = socket;
    return socket;
  }

  async run(input: OutputInput): Promise<Outcome> {
    const label = 'agent outputs';
    const sent = `${input.content} declared ${input.declared}`;
    await this.#connect();
    this.#current = input;
    // Only this host may run it (the router passes over every other).
    const grant = narrowGrant(this.admin, [`hosts ${this.host}`]);
    const call = async (method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> => {
      const response = await fetch(`${this.url}${path}`, {
        method, headers: { authorization: `Bearer ${grant}`, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined,
      });
      return { status: response.status, json: await response.json().catch(() => null) };
    };
    const submitted = await call('POST', '/v1/jobs', { type: 'image', model: 'gen', input: { prompt: 'fuzz output', width: 8, height: 8, steps: 1 } });
    if (submitted.status !== 202) return { label, seen: String(submitted.status), problems: [`the job was not accepted: ${JSON.stringify(submitted.json)}`], sent };
    const deadline = Date.now() + 20_000;
    let job: { status: string; error?: { code: string }; artifacts?: { mediaType: string }[] } = { status: 'queued' };
    while (Date.now() < deadline && !['succeeded', 'failed', 'cancelled', 'expired'].includes(job.status)) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      job = (await call('GET', `/v1/jobs/${String(submitted.json.id)}`)).json;
    }
    const problems: string[] = [];
    const first = this.#publishedAs.get(input.content);
    const expected = acceptable(input) && (first === undefined || first === input.declared) ? 'succeeded' : 'failed';
    if (job.status === 'succeeded') this.#publishedAs.set(input.content, input.declared);
    if (job.status !== expected) problems.push(`expected the job to end ${expected}, it is ${job.status} ${JSON.stringify(job.error ?? null)}`);
    if (job.status === 'failed' && !['INTEGRITY_FAILED', 'RETRIES_EXHAUSTED'].includes(job.error?.code ?? '')) problems.push(`failed with ${job.error?.code}, not INTEGRITY_FAILED`);
    if (job.status === 'succeeded' && job.artifacts?.[0]?.mediaType !== input.declared) problems.push(`published as ${job.artifacts?.[0]?.mediaType}`);
    if (!['succeeded', 'failed', 'cancelled', 'expired'].includes(job.status)) await call('DELETE', `/v1/jobs/${String(submitted.json.id)}`);
    return { label, seen: job.status, problems, sent };
  }

  close(): void {
    this.#socket?.close();
  }
}
