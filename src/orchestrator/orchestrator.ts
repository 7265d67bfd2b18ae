import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { pino, type Logger } from 'pino';
import { GrantAuthority, type GrantKind } from './auth/index.js';
import { systemClock, type Clock } from './clock.js';
import type { MeshConfig } from './config.js';
import { JobEventBus } from './events.js';
import { authorizeJoin } from './http/agents.js';
import type { HttpContext } from './http/context.js';
import { JobLifecycle, JobService } from './jobs/index.js';
import { MeshMetrics } from './metrics.js';
import { AgentHub } from './link/agent-hub.js';
import { BlobStore, ModelRegistry, type RegisteredModel } from './registry/index.js';
import { Router } from './routing/index.js';
import { Admission, MemoryEstimator, MemoryPlanner, Scheduler } from './scheduler/index.js';
import { buildServer } from './server.js';
import { blobs, grants, GroupCommit, openDb, type Db } from './store/index.js';
import { VERSION } from '../version.js';

export interface OrchestratorOptions {
  config: MeshConfig;
  clock?: Clock;
  logger?: Logger;
  /** Where the gallery's files are; default: web/ of this package. */
  webRoot?: string;
}

/** Read a secret file, or create it with fresh random bytes, readable only by its owner. */
function secretFile(path: string, make: () => string): string {
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const value = make();
  writeFileSync(path, `${value}\n`, { mode: 0o600, flag: 'wx' });
  return value;
}

/**
 * The orchestrator process: builds its parts (store, blobs, registry, grants,
 * scheduler, job lifecycle, agent hub, HTTP server) and wires them together.
 */
export class Orchestrator {
  readonly config: MeshConfig;
  readonly log: Logger;
  readonly #db: Db;
  readonly #commits: GroupCommit;
  readonly #authority: GrantAuthority;
  readonly #lifecycle: JobLifecycle;
  readonly #hub: AgentHub;
  readonly #app: FastifyInstance;
  #url: string | null = null;

  private constructor(parts: {
    config: MeshConfig; log: Logger; db: Db; commits: GroupCommit; authority: GrantAuthority; lifecycle: JobLifecycle; hub: AgentHub; app: FastifyInstance;
  }) {
    this.config = parts.config;
    this.log = parts.log;
    this.#db = parts.db;
    this.#commits = parts.commits;
    this.#authority = parts.authority;
    this.#lifecycle = parts.lifecycle;
    this.#hub = parts.hub;
    this.#app = parts.app;
  }

  static async create(options: OrchestratorOptions): Promise<Orchestrator> {
    const { config } = options;
    const clock = options.clock ?? systemClock;
    const log = options.logger ?? pino({ level: process.env.GPUMESH_LOG_LEVEL ?? 'info' });
    const db = openDb(join(config.data, 'store.sqlite'));
    const commits = new GroupCommit(db);
    const blobStore = new BlobStore(join(config.data, 'blobs'));
    const registry = new ModelRegistry(config);
    await registry.addBuiltins(blobStore, (digest, bytes, mediaType) => blobs.recordBlob(db, { digest, bytes, mediaType }, clock.now()));

    const rootKey = Buffer.from(secretFile(join(config.data, 'secret.key'), () => randomBytes(32).toString('base64')), 'base64');
    const location = config.server.publicUrl ?? `http://${config.server.host}:${config.server.port}`;
    const authority = new GrantAuthority(rootKey, location, grants.revokedGrantIds(db));

    const events = new JobEventBus();
    const admission = new Admission(clock);
    let hub: AgentHub | undefined;
    let lifecycle: JobLifecycle | undefined;
    const router = new Router(() => hub?.hosts() ?? []);
    const memory = new MemoryPlanner<RegisteredModel>(new MemoryEstimator(), (model, classes) => router.candidates(model, classes));
    let scheduler: Scheduler | undefined;
    const metrics = new MeshMetrics({ queueDepths: () => scheduler?.depths() ?? {}, hosts: () => hub?.hosts() ?? [] });
    scheduler = new Scheduler({
      clock, agingMs: config.priorities.agingMs,
      model: (name) => registry.get(name),
      pickHost: (model, classes) => router.pick(model, classes),
      dispatch: (model, jobs, host) => lifecycle!.dispatch(model, jobs, host),
      batchCap: (model, job, host) => memory.batchCap(model, job.input ?? {}, host),
    });
    lifecycle = new JobLifecycle({
      db, commits, clock, events, scheduler, admission, metrics, log: log.child({ part: 'jobs' }),
      model: (name) => registry.get(name),
      // Valid for as long as the job may run, and an hour more for slow uploads.
      mintUploadGrant: (jobId, validMs) => authority.mint('upload', [`job ${jobId}`, `time-before ${new Date(clock.now() + validMs + 3_600_000).toISOString()}`]).token,
      retryBackoffMs: config.retry.backoffMs,
      reconnectGraceMs: config.agents.reconnectGraceMs,
      observeMemory: (model, report) => memory.observe(model, report),
    });
    const jobs = new JobService({ db, commits, clock, config, registry, scheduler, admission, lifecycle, metrics, memory });
    const context: HttpContext = {
      config, clock, db, commits, blobs: blobStore, registry, authority, jobs, events, scheduler, metrics,
      hub: undefined as unknown as AgentHub,
      webRoot: options.webRoot ?? new URL('../../web/', import.meta.url).pathname,
    };
    hub = new AgentHub({
      clock, lifecycle, scheduler, log: log.child({ part: 'link' }),
      heartbeatMs: config.agents.heartbeatMs, staleAfterMs: config.agents.staleAfterMs,
      authorizeJoin: authorizeJoin(context),
    });
    context.hub = hub;
    const app = await buildServer(context, log, VERSION);
    const recovered = lifecycle.recover();
    if (recovered.queued + recovered.orphaned > 0) log.info(recovered, 'recovered jobs from the store');
    return new Orchestrator({ config, log, db, commits, authority, lifecycle, hub, app });
  }

  /** Start listening; returns the base URL. */
  async listen(): Promise<string> {
    const { host, port } = this.config.server;
    await this.#app.listen({ host, port });
    const address = this.#app.server.address();
    const actualPort = typeof address === 'object' && address ? address.port : port;
    const reachable = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
    this.#url = this.config.server.publicUrl ?? `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${actualPort}`;
    // Tells the CLI on this machine where the mesh listens, whatever port it got.
    writeFileSync(join(this.config.data, 'orchestrator.url'), `${this.#url}\n`);
    return this.#url;
  }

  get url(): string {
    if (!this.#url) throw new Error('the orchestrator is not listening yet');
    return this.#url;
  }

  /** Mint a grant directly (the CLI's `up` uses this for the admin, gallery and local agent grants). */
  mint(kind: GrantKind, caveats: readonly string[] = [], note: string | null = null): string {
    const minted = this.#authority.mint(kind, caveats);
    grants.recordGrant(this.#db, { id: minted.id, kind, note }, Date.now());
    return minted.token;
  }

  /** The admin grant in `<data>/admin.grant` (mode 0600), minted on first start. */
  adminGrant(): string {
    const path = join(this.config.data, 'admin.grant');
    const token = secretFile(path, () => this.mint('admin', [], 'admin.grant'));
    try {
      this.#authority.verify(token, Date.now());
      return token;
    } catch {
      throw new Error(`${path} holds a grant this mesh does not accept (was secret.key replaced?); delete the file to mint a new one`);
    }
  }

  get agentsConnected(): number {
    return this.#hub.size;
  }

  async close(): Promise<void> {
    this.#hub.close();
    this.#lifecycle.close();
    await this.#app.close();
    this.#commits.flush();
    this.#db.close();
    rmSync(join(this.config.data, 'orchestrator.url'), { force: true });
  }
}
