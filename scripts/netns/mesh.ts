import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createParser } from 'eventsource-parser';
import { stringify } from 'yaml';
import { ApiError, MeshClient } from '../../src/cli/common/client.js';
import { gpumeshArgs } from '../../src/cli/common/launch.js';
import type { MeshConfigInput } from '../../src/orchestrator/config/config.js';
import type { HostView, JobView, MeshEvent } from '../../src/protocol/api/index.js';
import type { Topology } from './topology.js';

const PORT = 7070;
const runFile = promisify(execFile);

/** Poll until `check` gives a truthy value; bounded by `timeoutMs`. */
export async function until<T>(what: string, check: () => T | Promise<T>, timeoutMs = 30_000, intervalMs = 50): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `promise`'s value, or `late()`'s (or its throw) if `ms` pass first. The timer is cleared either way: a timer left
 * running would keep the driver's process alive for its whole length after the scenario ended.
 */
export async function within<T, L>(promise: Promise<T>, ms: number, late: () => L): Promise<T | L> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<L>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(late());
      } catch (error) {
        reject(error);
      }
    }, ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A gpumesh process started in a host's namespace, its output in `<work>/logs/<label>.log`. */
export interface MeshProcess {
  label: string;
  child: ChildProcess;
  exited: Promise<number | null>;
  running(): boolean;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

export function spawnLogged(argv: string[], label: string, logs: string, env: NodeJS.ProcessEnv = {}): MeshProcess {
  mkdirSync(logs, { recursive: true });
  const log = createWriteStream(join(logs, `${label}.log`), { flags: 'a' });
  // `ip netns exec` execs its command, so the pid is the gpumesh process itself: a signal reaches it directly.
  const child = spawn(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.pipe(log, { end: false });
  child.stderr!.pipe(log, { end: false });
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  return {
    label, child, exited,
    running: () => child.exitCode === null && child.signalCode === null,
    async kill(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}

export interface AgentSpec {
  host: string;
  classes: string[];
  /** The host's own config (host.yaml in its data folder): the commands and servers its owner lets the mesh run there. */
  hostConfig?: Record<string, unknown>;
}

/**
 * A mesh spread over the run's namespaces: `gpumesh serve` on the first host (listening on 0.0.0.0, reached at
 * that host's bridge address) and one `gpumesh agent` per other host, each joined with the line
 * `gpumesh grant create --agent` prints. Restarting the orchestrator keeps its data, port and grants.
 */
export class NetnsMesh {
  readonly url: string;
  readonly #topology: Topology;
  readonly #work: string;
  readonly #data: string;
  readonly #logs: string;
  readonly #agents = new Map<string, MeshProcess>();
  readonly #joins = new Map<string, string[]>();
  readonly #orchestratorHost: string;
  #orchestrator: MeshProcess | null = null;
  #starts = 0;
  #admin: MeshClient | null = null;

  /** `name`: a folder of the run's work folder for this mesh's data and logs (several meshes may run one after another). */
  constructor(topology: Topology, config: MeshConfigInput, name = 'mesh') {
    this.#topology = topology;
    this.#orchestratorHost = topology.hosts[0]!.name;
    this.url = `http://${topology.hosts[0]!.address}:${PORT}`;
    this.#work = join(topology.work, name);
    this.#data = join(this.#work, this.#orchestratorHost);
    this.#logs = join(this.#work, 'logs');
    mkdirSync(this.#data, { recursive: true });
    writeFileSync(join(this.#work, 'mesh.yaml'), stringify({ ...config, server: { ...config.server, host: '0.0.0.0', port: PORT } }));
  }

  get admin(): MeshClient {
    if (!this.#admin) throw new Error('the orchestrator has not started yet');
    return this.#admin;
  }

  /** The admin grant the orchestrator wrote at its first start (the same after a restart). */
  get adminGrant(): string {
    return readFileSync(join(this.#data, 'admin.grant'), 'utf8').trim();
  }

  get logs(): string {
    return this.#logs;
  }

  async startOrchestrator(): Promise<void> {
    const label = `orchestrator-${++this.#starts}`;
    this.#orchestrator = spawnLogged(this.#topology.command(this.#orchestratorHost, [
      process.execPath, ...gpumeshArgs(['serve', '--data', this.#data, '--config', join(this.#work, 'mesh.yaml')]),
    ]), label, this.#logs);
    const started = this.#orchestrator;
    await until(`the orchestrator to answer at ${this.url}`, async () => {
      if (!started.running()) throw new Error(`gpumesh serve exited with ${started.child.exitCode}; see ${join(this.#logs, `${label}.log`)}`);
      try {
        return (await fetch(`${this.url}/healthz`)).ok;
      } catch {
        return false;
      }
    }, 60_000);
    this.#admin = new MeshClient(this.url, this.adminGrant);
  }

  /** SIGKILL (or another signal) to the orchestrator, and wait until it is gone. */
  async killOrchestrator(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await this.#orchestrator?.kill(signal);
  }

  /** `gpumesh <args>` on the orchestrator's host, with its admin grant; resolves with stdout and stderr. */
  async cli(args: string[]): Promise<{ stdout: string; stderr: string }> {
    const argv = this.#topology.command(this.#orchestratorHost, [process.execPath, ...gpumeshArgs([...args, '--url', this.url])]);
    return runFile(argv[0]!, argv.slice(1), { env: { ...process.env, GPUMESH_HOME: this.#data }, timeout: 60_000 });
  }

  /**
   * Join a host the way a user would: mint its grant with `gpumesh grant create --agent` and run the line it
   * prints, on that host, with a few options of ours (its data folder, a CPU budget, no cgroups).
   */
  async startAgent(spec: AgentSpec): Promise<MeshProcess> {
    let joinLine = this.#joins.get(spec.host);
    if (!joinLine) {
      const { stderr } = await this.cli(['grant', 'create', '--agent', '--host', spec.host, '--classes', spec.classes.join(','), '--join-url', this.url]);
      const line = /^gpumesh agent --join \S+ --grant \S+$/m.exec(stderr)?.[0];
      if (!line) throw new Error(`gpumesh grant create --agent printed no join line:\n${stderr}`);
      this.#joins.set(spec.host, (joinLine = line.split(' ').slice(1)));
    }
    const data = join(this.#work, `agent-${spec.host}`);
    if (spec.hostConfig) {
      mkdirSync(data, { recursive: true });
      writeFileSync(join(data, 'host.yaml'), stringify(spec.hostConfig));
    }
    const agent = spawnLogged(this.#topology.command(spec.host, [
      process.execPath, ...gpumeshArgs([...joinLine, '--data', data, '--cpu-budget', '1024', '--cgroups', 'off']),
    ]), `agent-${spec.host}`, this.#logs);
    this.#agents.set(spec.host, agent);
    return agent;
  }

  agent(host: string): MeshProcess {
    const agent = this.#agents.get(host);
    if (!agent) throw new Error(`no agent started on ${host}`);
    return agent;
  }

  async hosts(): Promise<HostView[]> {
    return (await this.admin.request<{ hosts: HostView[] }>('GET', '/v1/hosts')).hosts;
  }

  async host(id: string): Promise<HostView | undefined> {
    return (await this.hosts()).find((host) => host.id === id);
  }

  /** Wait until each named host is connected (over the bridge, from its own namespace). */
  async connected(ids: readonly string[], timeoutMs = 60_000): Promise<void> {
    await until(`${ids.join(', ')} to be connected`, async () => {
      try {
        const hosts = await this.hosts();
        return ids.every((id) => hosts.some((host) => host.id === id && host.connected));
      } catch (error) {
        if (error instanceof ApiError && error.status === 0) return false; // the orchestrator is restarting
        throw error;
      }
    }, timeoutMs, 100);
  }

  async stop(): Promise<void> {
    for (const agent of this.#agents.values()) await agent.kill('SIGKILL');
    await this.#orchestrator?.kill('SIGKILL');
  }
}

/** A mesh event and when the driver received it. */
export interface SeenEvent {
  event: MeshEvent;
  at: number;
}

/**
 * The mesh events on `GET /v1/events`, kept in order with the time each arrived. The stream is reopened when it
 * ends (the orchestrator restarted), so it spans restarts.
 */
export class MeshEvents {
  readonly seen: SeenEvent[] = [];
  readonly #abort = new AbortController();

  constructor(url: string, grant: string) {
    void this.#follow(url, grant);
  }

  /** Events matching `filter`, in order. */
  where(filter: (event: MeshEvent) => boolean): SeenEvent[] {
    return this.seen.filter((seen) => filter(seen.event));
  }

  close(): void {
    this.#abort.abort();
  }

  async #follow(url: string, grant: string): Promise<void> {
    while (!this.#abort.signal.aborted) {
      try {
        const response = await fetch(`${url}/v1/events`, { headers: { authorization: `Bearer ${grant}` }, signal: this.#abort.signal });
        const parser = createParser({
          onEvent: (message) => {
            const event = JSON.parse(message.data) as { type?: string };
            if (typeof event.type === 'string' && event.type.includes(':')) this.seen.push({ event: event as MeshEvent, at: Date.now() });
          },
        });
        const decoder = new TextDecoder();
        for await (const chunk of response.body!) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
      } catch {
        // The stream broke (a restart); reopen it below.
      }
      await sleep(200);
    }
  }
}

/** A job the driver got a 202 (or 200) for. */
export interface AcceptedJob {
  id: string;
  /** What the scenario calls it (image, clip, batch, …). */
  kind: string;
  submittedAt: number;
}

/**
 * Submits jobs as a careful client does — each with an idempotency key, retried on a dropped connection or a 429
 * until accepted — and remembers every job accepted, so a run can check that each completed exactly once.
 */
export class JobLedger {
  readonly accepted = new Map<string, AcceptedJob>();
  readonly #client: () => MeshClient;
  readonly #prefix: string;
  #count = 0;
  /** Submits answered twice with the same job (a retry after a dropped connection whose first try had landed). */
  deduplicated = 0;

  constructor(client: () => MeshClient, prefix: string) {
    this.#client = client;
    this.#prefix = prefix;
  }

  async submit(kind: string, body: Record<string, unknown>, client?: MeshClient, timeoutMs = 60_000): Promise<AcceptedJob> {
    const idempotencyKey = `${this.#prefix}-${++this.#count}`;
    const submittedAt = Date.now();
    const deadline = submittedAt + timeoutMs;
    let tries = 0;
    for (;;) {
      try {
        const answer = await (client ?? this.#client()).submit({ ...body, idempotencyKey });
        if (tries > 0 && this.accepted.has(answer.id)) this.deduplicated++;
        const job = { id: answer.id, kind, submittedAt };
        this.accepted.set(job.id, job);
        return job;
      } catch (error) {
        const retry = error instanceof ApiError && (error.status === 0 || error.status === 429 || error.status === 503);
        if (!retry || Date.now() > deadline) throw error;
        tries++;
        await sleep(Math.min(1000, 50 * 2 ** tries));
      }
    }
  }

  /** Submit one job every `intervalMs` until stopped; stop() waits for the submits in flight. */
  stream(kind: string, body: (n: number) => Record<string, unknown>, intervalMs: number, client?: MeshClient): { stop(): Promise<AcceptedJob[]> } {
    const pending: Promise<AcceptedJob>[] = [];
    let n = 0;
    const timer = setInterval(() => pending.push(this.submit(kind, body(n++), client)), intervalMs);
    pending.push(this.submit(kind, body(n++), client));
    return {
      async stop() {
        clearInterval(timer);
        return Promise.all(pending);
      },
    };
  }

  /** Wait until every accepted job (or those given) is terminal; their final views. */
  async settle(jobs: Iterable<AcceptedJob> = this.accepted.values(), timeoutMs = 60_000): Promise<Map<string, JobView>> {
    const views = new Map<string, JobView>();
    const open = new Set([...jobs].map((job) => job.id));
    await until(`${open.size} jobs to finish`, async () => {
      const batch = [...open];
      for (let i = 0; i < batch.length; i += 16) {
        await Promise.all(batch.slice(i, i + 16).map(async (id) => {
          try {
            const view = await this.#client().job(id);
            if (['succeeded', 'failed', 'cancelled', 'expired'].includes(view.status)) {
              views.set(id, view);
              open.delete(id);
            }
          } catch (error) {
            if (!(error instanceof ApiError && error.status === 0)) throw error;
          }
        }));
      }
      return open.size === 0;
    }, timeoutMs, 200);
    return views;
  }
}
