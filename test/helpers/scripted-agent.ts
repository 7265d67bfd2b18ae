import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { PNG } from 'pngjs';
import WebSocket from 'ws';
import { LINK_PATH, LINK_PROTOCOL_VERSION, type HostAway, type OrchestratorMessage } from '../../src/protocol/index.js';

type Run = Extract<OrchestratorMessage, { type: 'run' }>;

/** What the agent does with the nth real batch it is sent (probes always succeed unless `probes` says otherwise). */
export type Behaviour = 'ok' | 'fail' | 'stall';

export interface ScriptedAgentOptions {
  url: string;
  grant: string;
  host: string;
  classes: string[];
  /** Decides each real batch's fate by its number (1, 2, …). */
  batches: (n: number, run: Run) => Behaviour;
  /** Decides each probe's fate; default: succeed. */
  probes?: (n: number, run: Run) => Behaviour;
  /** The compute time it reports per batch (drives its measured throughput). */
  computeMs?: number;
  /** Its GPU's temperature (°C) and power (W), as a driver would say them in every heartbeat; absent: none said. */
  gpu?: { temperatureC: number; powerW: number; powerLimitW: number };
  /** The energy it reports each job took (J), as an agent whose GPU reports power does; absent: none. */
  energyJ?: number;
}

/**
 * A fixture agent over a real WebSocket that speaks the link protocol and
 * misbehaves on purpose: it keeps `gen` resident, heartbeats, and answers
 * each batch as its script says — succeed (a small inline PNG per job),
 * fail (retryable ENGINE_FAILED), or stall (say it started, then nothing).
 * Everything it was sent is kept in `runs` for the test to inspect.
 */
export class ScriptedAgent {
  readonly socket: WebSocket;
  readonly runs: { run: Run; behaviour: Behaviour }[] = [];
  #heartbeat: NodeJS.Timeout | null = null;
  #away: HostAway | null = null;
  #batches = 0;
  #probes = 0;
  readonly #options: ScriptedAgentOptions;
  readonly welcomed: Promise<void>;

  constructor(options: ScriptedAgentOptions) {
    this.#options = options;
    const url = new URL(LINK_PATH, options.url);
    url.protocol = 'ws:';
    this.socket = new WebSocket(url, { headers: { authorization: `Bearer ${options.grant}` } });
    let welcomed!: () => void;
    this.welcomed = new Promise((resolve) => (welcomed = resolve));
    this.socket.on('message', (data) => {
      const message = JSON.parse(data.toString()) as OrchestratorMessage;
      if (message.type === 'welcome') {
        // Resident from the start, as a warm replica would be after its first batch.
        this.#send({ type: 'loaded', model: 'gen', digest: 'sha256:scripted', device: 'gpu0', memoryMB: 64 });
        this.#heartbeat = setInterval(() => this.#beat(), message.heartbeatMs);
        welcomed();
      }
      if (message.type === 'run') this.#run(message);
    });
    this.socket.once('open', () => this.#send({
      type: 'hello', protocol: LINK_PROTOCOL_VERSION, host: options.host, classes: options.classes, engines: ['onnx'], models: [], inFlight: [],
      devices: this.#devices(), concurrency: 1, version: 'scripted',
    }));
  }

  /** Say it takes no work now (its owner, its hours, its heat), or that it does again (null): a heartbeat at once. */
  setAway(away: HostAway | null): void {
    this.#away = away;
    this.#beat();
  }

  #beat(): void {
    this.#send({ type: 'heartbeat', resident: this.#resident(), devices: this.#devices(), away: this.#away });
  }

  /** Real batches answered each way so far. */
  count(behaviour: Behaviour): number {
    return this.runs.filter((entry) => !entry.run.probe && entry.behaviour === behaviour).length;
  }

  get probes(): number {
    return this.#probes;
  }

  async close(): Promise<void> {
    if (this.#heartbeat) clearInterval(this.#heartbeat);
    if (this.socket.readyState === WebSocket.CLOSED) return;
    this.socket.close();
    await once(this.socket, 'close');
  }

  #run(run: Run): void {
    const behaviour = run.probe ? (this.#options.probes ?? (() => 'ok'))(++this.#probes, run) : this.#options.batches(++this.#batches, run);
    this.runs.push({ run, behaviour });
    const jobIds = run.jobs.map((job) => job.id);
    this.#send({ type: 'started', batchId: run.batchId, jobIds });
    if (behaviour === 'stall') return;
    const computeMs = this.#options.computeMs ?? 5;
    for (const job of run.jobs) {
      if (behaviour === 'fail') {
        this.#send({ type: 'failed', jobId: job.id, batchId: run.batchId, retryable: true, error: { code: 'ENGINE_FAILED', message: `scripted failure of batch ${this.#batches}` } });
        continue;
      }
      const bytes = scriptedPng(`scripted output of ${job.id} by ${this.#options.host}`);
      const artifacts = run.probe ? [] : [{
        digest: `sha256:${createHash('sha256').update(bytes).digest('hex')}`, mediaType: 'image/png', bytes: bytes.length, inline: bytes.toString('base64'),
      }];
      this.#send({
        type: 'done', jobId: job.id, batchId: run.batchId, artifacts, timings: { loadMs: 0, computeMs, totalMs: computeMs },
        ...(this.#options.energyJ !== undefined ? { energyJ: this.#options.energyJ } : {}),
      });
    }
  }

  #resident() {
    return [{ model: 'gen', digest: 'sha256:scripted', device: 'gpu0', memoryMB: 64, lastUsedAt: Date.now() }];
  }

  #devices() {
    return [{ id: 'gpu0', kind: 'gpu' as const, name: 'scripted', memoryTotalMB: 8192, budgetMB: 4096, usedMB: 64, ...this.#options.gpu }];
  }

  #send(message: unknown): void {
    if (this.socket.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(message));
  }
}

/** A real PNG (the orchestrator checks an output's bytes against its media type), 4×1 pixels coloured by `text`'s hash. */
export function scriptedPng(text: string): Buffer {
  const png = new PNG({ width: 4, height: 1 });
  const hash = createHash('sha256').update(text).digest();
  for (let pixel = 0; pixel < 4; pixel++) {
    hash.copy(png.data, pixel * 4, pixel * 3, pixel * 3 + 3);
    png.data[pixel * 4 + 3] = 255;
  }
  return PNG.sync.write(png);
}
