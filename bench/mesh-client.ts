import http from 'node:http';
import { createParser } from 'eventsource-parser';
import { MLP_INPUT_DIM } from '../src/builtin-models/index.js';

/** The `mlp` tensor model's input number `i`: one 64-value sample, different for each i (every benchmark's tiny job). */
export const mlpSample = (i: number): number[] => Array.from({ length: MLP_INPUT_DIM }, (_, k) => Math.sin(i + k));

/** A tensor job for `mlp` with sample `i`. */
export const mlpJob = (i: number): { type: 'tensor'; input: { x: number[] } } => ({ type: 'tensor', input: { x: mlpSample(i) } });

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/**
 * A lean client for benchmarks: node:http with keep-alive (Node 20's fetch
 * costs about a millisecond a request, which would be measured as mesh
 * overhead) and one /v1/events stream that resolves each job's completion.
 */
export class BenchClient {
  readonly #url: URL;
  readonly #headers: Record<string, string>;
  readonly #agent: http.Agent;
  readonly #ended = new Map<string, { type: string; at: number }>();
  readonly #waiting = new Map<string, () => void>();
  #stream: http.IncomingMessage | null = null;

  constructor(baseUrl: string, grant: string, maxSockets = 64) {
    this.#url = new URL(baseUrl);
    this.#headers = { authorization: `Bearer ${grant}`, 'content-type': 'application/json' };
    this.#agent = new http.Agent({ keepAlive: true, maxSockets });
  }

  /**
   * Open the event stream; call before submitting. `also`: more event types to receive (e.g. `loading`), each
   * handed to `onEvent` with the moment it arrived, as the terminal ones are too.
   */
  async listen(also: readonly string[] = [], onEvent?: (type: string, data: Record<string, unknown>, at: number) => void): Promise<void> {
    const terminal = ['succeeded', 'failed', 'cancelled', 'expired'];
    const types = [...new Set([...terminal, ...also])].join(',');
    this.#stream = await new Promise<http.IncomingMessage>((resolve, reject) => {
      http.get({ host: this.#url.hostname, port: this.#url.port, path: `/v1/events?types=${types}`, agent: false, headers: this.#headers }, resolve).on('error', reject);
    });
    const parser = createParser({
      onEvent: (message) => {
        if (onEvent && message.event && (terminal.includes(message.event) || also.includes(message.event))) {
          onEvent(message.event, JSON.parse(message.data) as Record<string, unknown>, performance.now());
        }
        if (!terminal.includes(message.event ?? '')) return;
        const { jobId } = JSON.parse(message.data) as { jobId: string };
        this.#ended.set(jobId, { type: message.event!, at: performance.now() });
        this.#waiting.get(jobId)?.();
        this.#waiting.delete(jobId);
      },
    });
    this.#stream.setEncoding('utf8');
    this.#stream.on('data', (chunk: string) => parser.feed(chunk));
  }

  request(method: string, path: string, body?: string | Buffer, headers: Record<string, string> = {}): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const outgoing = http.request({ host: this.#url.hostname, port: this.#url.port, method, path, agent: this.#agent, headers: { ...this.#headers, ...headers } }, (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, text }));
        response.on('error', reject);
      });
      outgoing.on('error', reject);
      outgoing.end(body);
    });
  }

  /** Submit a job that must be admitted; returns its id. */
  async submit(job: unknown): Promise<string> {
    const reply = await this.request('POST', '/v1/jobs', JSON.stringify(job));
    if (reply.status !== 202) throw new Error(`submit failed: ${reply.status} ${reply.text}`);
    return (JSON.parse(reply.text) as { id: string }).id;
  }

  /** How and when a job ended (from the event stream). */
  ended(id: string): { type: string; at: number } | undefined {
    return this.#ended.get(id);
  }

  /** Resolves when the job's terminal event arrives. */
  async completion(id: string): Promise<{ type: string; at: number }> {
    if (!this.#ended.has(id)) await new Promise<void>((resolve) => this.#waiting.set(id, resolve));
    return this.#ended.get(id)!;
  }

  /** Submit with `Prefer: wait` and take the finished job from the answer (no event stream); returns the milliseconds it took. */
  async runWaiting(job: unknown): Promise<number> {
    const start = performance.now();
    const reply = await this.request('POST', '/v1/jobs', JSON.stringify(job), { prefer: 'wait=30' });
    if (reply.status !== 200) throw new Error(`submit with Prefer: wait did not finish in time: ${reply.status} ${reply.text}`);
    const { status } = JSON.parse(reply.text) as { status: string };
    if (status !== 'succeeded') throw new Error(`job ${status}: ${reply.text}`);
    return performance.now() - start;
  }

  /** Submit and wait for the end; returns the milliseconds it took. */
  async run(job: unknown): Promise<number> {
    const start = performance.now();
    const end = await this.completion(await this.submit(job));
    return end.at - start;
  }

  close(): void {
    this.#stream?.destroy();
    this.#agent.destroy();
  }
}

/** Keep `inflight` mlp jobs outstanding until `count` have completed; resolves with jobs per second. */
export async function closedLoop(client: BenchClient, count: number, inflight: number): Promise<number> {
  let next = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: inflight }, async () => {
    while (next < count) await client.run(mlpJob(next++));
  }));
  return count / ((performance.now() - start) / 1000);
}
