import { randomBytes } from 'node:crypto';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { pino, type Logger } from 'pino';
import { AuditLog } from './auth/audit.js';
import { OpenDoors } from './auth/open-doors.js';
import { sendMagicPackets } from './wake/magic-packet.js';
import { Waker } from './wake/waker.js';
import { anyOutOfHours, refuseBeyondHours } from './routing/hours-admission.js';
import { WebhookTargets, Webhooks, webhookSecret } from './webhooks/index.js';
import { GrantAuthority, GrantIssuer, GrantLifetimes, UploadCredentials, type GrantKind } from './auth/index.js';
import { Autoscaler } from './autoscale/index.js';
import { systemClock, type Clock } from '../protocol/clock.js';
import { linkFrameLimit, relayChunkBytes, type MeshConfig } from './config/config.js';
import { EventBus } from './events/event-bus.js';
import { RequestAuth } from './http/auth.js';
import { BlobVisibility, ClientCancel, createJobCore, JobAdmission, JobExplainer, JobReads, PipelineEnds, Pipelines } from './jobs/index.js';
import { MeshMetrics } from './metrics/mesh-metrics.js';
import { MeshSeries } from './metrics/series.js';
import { GalleryService } from './gallery/gallery-service.js';
import { Thumbnails } from './gallery/thumbnails.js';
import { MemorySocket } from '../net/memory-link.js';
import { AgentHub } from './link/agent-hub.js';
import { RelayMetrics } from './relay/relay-metrics.js';
import { Relays } from './relay/relays.js';
import { joinAuthorizer } from './link/join.js';
import { ModelRegistry, type RegisteredModel } from './registry/index.js';
import { BlobReader } from './blobs/blob-reader.js';
import { openBlobStore } from './blobs/open-blob-store.js';
import { unknownEngines } from './config/declared-models.js';
import { ModelCoverage } from './status/model-coverage.js';
import { removeListenFile, writeListenFile } from '../protocol/listen-file.js';
import { AttemptBudgets, BreakerBoard, ClassAvailability, HealthBook, HostRegistry, Prober, Router, ThroughputBook, WorkflowFit } from './routing/index.js';
import { announceBreakers } from './metrics/announce-breakers.js';
import { RoutingFeedback } from './jobs/routing-feedback.js';
import { Admission, LineageCaps, MemoryEstimator, MemoryPlanner, Scheduler, SwapPolicy } from './scheduler/index.js';
import { buildServer } from './server.js';
import { secretFile } from './secret-file.js';
import { MeshStatus } from './status/mesh-status.js';
import { SqliteStore, type MeshStore } from './store/index.js';
import { loadServerTls, tlsCaCaveat } from './tls-server/index.js';
import type { HostView } from '../protocol/api/index.js';
import { MeshError, modelDigests } from '../protocol/index.js';
import { VERSION } from '../version.js';
import { ClientBlobs } from './blobs/client-blobs.js';
import { DigestLocks } from './blobs/digest-locks.js';
import { BlobReclaimer } from './blobs/reclaim.js';
import { InputImages } from './blobs/input-images.js';
import { StagedUploads } from './blobs/staged-uploads.js';
import { JobRetention, type SweptJobs } from './jobs/retention.js';
import { ModelCatalog } from './registry/catalog.js';
import { ReplicaRequests } from './autoscale/replica-requests.js';
import { SelfPackage } from './install/self-package.js';
import { FreeSpace } from './storage/free-space.js';

/** A resumable upload not completed within this long is deleted (at the start, and by the hourly sweep). */
const UPLOAD_MAX_AGE_MS = 7 * 24 * 3600 * 1000;
/** How often a running orchestrator looks for abandoned uploads. */
const UPLOAD_SWEEP_EVERY_MS = 3600 * 1000;
/** How often it deletes the finished jobs its retention no longer keeps. */
const JOB_SWEEP_EVERY_MS = 600 * 1000;

export interface OrchestratorOptions {
  config: MeshConfig;
  clock?: Clock;
  logger?: Logger;
  /** Where the gallery's files are; default: web/ of this package. */
  webRoot?: string;
  /** The store; default: SQLite in the data folder. Orchestrators sharing PostgreSQL are each given theirs (standby/shared-orchestrator.ts). */
  store?: MeshStore;
  /** The secret grants are signed with, where orchestrators share it (the store's); default: <data>/secret.key. */
  rootKey?: Buffer;
  /** The orchestrators sharing the store, for GET /v1/status; absent: this one alone. */
  orchestrators?: () => Promise<readonly object[]>;
  /** Run once the orchestrator has closed (a shared one lets its lease go). */
  afterClose?: () => Promise<void>;
}

/** The parts the facade itself needs after start; everything else lives inside them. */
interface Parts {
  config: MeshConfig;
  log: Logger;
  clock: Clock;
  store: MeshStore;
  afterClose?: () => Promise<void>;
  authority: GrantAuthority;
  issuer: GrantIssuer;
  status: MeshStatus;
  hub: AgentHub;
  stoppables: { close(): void }[];
  app: FastifyInstance;
  /** The fingerprint of the private CA a TLS mesh serves with (what its grants pin); null for plain HTTP. */
  tlsCaFingerprint: string | null;
}

/**
 * The orchestrator process. `create` builds its parts in dependency order —
 * store, registry, grants, events, hosts, scheduler, the autoscaler, the job
 * roles (states, dispatch, failover, cancellation, recovery, result intake), the agent hub,
 * the client services and the HTTP server — each taking what it uses in its
 * constructor; the methods here are one-line delegations.
 */
/**
 * Acknowledgements of results wait up to this long for the next message to their host (the next batch, under load) and
 * go with it in one write; an agent keeps each result until acknowledged, so waiting costs only its memory.
 */
const ACK_DELAY_MS = 5;

export class Orchestrator {
  readonly config: MeshConfig;
  readonly log: Logger;
  /** The fingerprint of the private CA a TLS mesh serves with (what its grants pin); null for plain HTTP. */
  readonly tlsCaFingerprint: string | null;
  readonly #parts: Parts;
  #url: string | null = null;

  private constructor(parts: Parts) {
    this.config = parts.config;
    this.log = parts.log;
    this.tlsCaFingerprint = parts.tlsCaFingerprint;
    this.#parts = parts;
  }

  static async create(options: OrchestratorOptions): Promise<Orchestrator> {
    const { config } = options;
    const clock = options.clock ?? systemClock;
    const log = options.logger ?? pino({ level: process.env.GPUMESH_LOG_LEVEL ?? 'info' });
    for (const { field, use } of config.deprecated ?? []) log.warn({ field, use }, `mesh.yaml: ${field} is a deprecated name, read as ${use}: rename it`);

    const store: MeshStore = options.store ?? SqliteStore.inFolder(config.data, clock);
    const { commits } = store;
    // Blob-store hook: a folder under data (default) or a bucket (mesh.yaml's blobs); everything below uses the interface.
    const blobStore = openBlobStore(config);
    if (config.blobs.kind !== 'local') log.info({ blobs: blobStore.location }, 'blobs are kept in a bucket');
    const registry = new ModelRegistry(config);
    const recordBlob = (digest: string, bytes: number, mediaType: string): void => commits.write(() => store.blobs.recordBlob({ digest, bytes, mediaType }, clock.now()));
    await registry.addBuiltins(blobStore, recordBlob);
    // Engine-registry hook: models declared in mesh.yaml (files imported); a model of an engine this orchestrator does not know is said once.
    for (const model of unknownEngines(await registry.addDeclared(blobStore, recordBlob))) {
      log.warn({ model: model.name, engine: model.engine }, `model "${model.name}" names the engine "${model.engine}", which this orchestrator does not know: only agents that list it in their hello will be sent its jobs`);
    }
    const hosts = new HostRegistry();
    // Models added at run time (gpumesh models add), back from the store; their unloads once removed go to the hosts.
    const catalog = new ModelCatalog({
      store, commits, clock, config, registry, blobs: blobStore,
      unloadEverywhere: (name) => { for (const host of hosts) if (host.hasReplica(name)) host.send({ type: 'unload', model: name }); },
    });
    const restored = await catalog.restore();
    if (restored > 0) log.info({ versions: restored }, 'models added at run time are back');
    registry.checkPolicies();

    const rootKey = options.rootKey ?? Buffer.from(secretFile(join(config.data, 'secret.key'), () => randomBytes(32).toString('base64')), 'base64');
    // TLS hook: the private CA and server certificate (null for plain HTTP); every grant minted here names the CA to pin.
    const tls = await loadServerTls(config, clock.now(), log);
    const location = config.server.publicUrl ?? `${tls ? 'https' : 'http'}://${config.server.host}:${config.server.port}`;
    const authority = new GrantAuthority(rootKey, location, await store.grants.revokedGrantIds(), tls ? [tlsCaCaveat(tls)] : []);
    const audit = new AuditLog({ store, commits, clock, retention: { days: config.audit.retentionDays, maxRows: config.audit.maxRows } });
    const lifetimes = new GrantLifetimes(authority, clock);
    const uploadCredentials = new UploadCredentials(rootKey);

    const events = new EventBus(clock);
    // Memory measured at a model's first load replaces the guess of a model added without one (the catalog decides which).
    events.subscribeAll(({ kind, event }) => {
      if (kind !== 'mesh' || event.type !== 'replica:loaded') return;
      catalog.measured(event.model, event.memoryMB).catch((error: unknown) => log.warn({ err: error, model: event.model }, 'could not record the memory measured for the model'));
    });
    const admission = new Admission(clock);
    // What routing knows of each host and replica: breakers, health, measured speed.
    const breakers = new BreakerBoard({ clock, policies: config.breakers });
    const throughput = new ThroughputBook();
    const health = new HealthBook({ clock, heartbeatMs: config.agents.heartbeatMs });
    const budgets = new AttemptBudgets(throughput, config.health.attemptTimeout);
    // Batches go only where the autoscaler placed a replica.
    const router = new Router({ hosts, breakers, health, throughput, replicasOnly: true });
    // Memory learned from what batches measured: refuses jobs too large for any host, caps batches to fit a host.
    const memory = new MemoryPlanner<RegisteredModel>(new MemoryEstimator(), (model, classes) => router.candidates(model, classes));
    // Two models that cannot share a device: drain the one a host holds before swapping (bounded), or swap at once.
    const swaps = new SwapPolicy({ policy: config.scheduling.swapPolicy, maxSwapHoldMs: config.scheduling.maxSwapHoldMs,
      memoryMB: (name) => registry.get(name)?.manifest.memoryMB, log: log.child({ part: 'swaps' }),
    });
    const scheduler = new Scheduler({
      model: (name) => registry.get(name), agingMs: config.priorities.agingMs, holdPartialBatches: config.batching.holdPartial,
      batchCap: (model, job, host) => memory.batchCap(model, job.input ?? {}, host),
      swaps,
    });
    // Caps of grant lineages (queued jobs, device-seconds per UTC day); the day's use so far is read back from the store.
    const caps = new LineageCaps({ clock, queuedOf: (lineage) => scheduler.queuedOf(lineage) });
    const capsSince = caps.dayStart();
    caps.restore(capsSince, await store.jobs.deviceMsByGrant(capsSince));
    const issuer = new GrantIssuer({ store, commits, clock, authority, audit, caps });
    const metrics = new MeshMetrics({
      queueDepths: () => scheduler.depths(), hosts, breakers: () => breakers.all(), throughput: () => throughput.all(),
      healthy: (host) => health.hostState(host) === 'healthy',
    });
    // The last 15 minutes for the mesh view's plots (GET /v1/series).
    const series = new MeshSeries({
      clock, queueDepths: () => scheduler.depths(), onJobFinished: (listener) => metrics.onJobFinished(listener),
      devices: function* () { for (const host of hosts) for (const device of host.devices) yield { host: host.id, device: device.id, usedMB: device.usedMB, budgetMB: device.budgetMB, temperatureC: device.temperatureC ?? null, powerW: device.powerW ?? null }; },
    });
    const model = (name: string) => registry.get(name);
    const autoscaler = new Autoscaler({
      clock, hosts, router, events, metrics, log: log.child({ part: 'autoscale' }), intervalMs: config.autoscaler.intervalMs,
      models: () => registry.all(), queued: (name) => scheduler.depth(name),
      blocked: (host, name) => breakers.blocking(host, name),
      // A replica that would evict a model with work there is the scheduler's swap to time, not the autoscaler's.
      displacesWork: (host, registered) => swaps.displacesWork(registered, host, (name) => scheduler.depth(name) > 0),
      classesOf: (registered) => [...new Set(registered.manifest.jobTypes.flatMap((type) => config.routing[type] ?? []))],
    });
    const uploadCredential = (batchId: string, validUntil: number): string => uploadCredentials.mint(batchId, validUntil);

    // Everything that stores, records or gives back a blob does so under its digest's lock (blobs/digest-locks.ts).
    const locks = new DigestLocks();
    const pictures = new InputImages({ store, commits, clock, blobs: blobStore, scratchDir: join(config.data, 'blobs', 'incoming') });
    const core = createJobCore({
      store, commits, clock, events, metrics, scheduler, router, hosts, admission, blobs: blobStore, locks, log, model, uploadCredential,
      retryBackoffMs: config.retry.backoffMs, reconnectGraceMs: config.agents.reconnectGraceMs, uploadLimitBytes: config.server.uploadLimitBytes,
      observeMemory: (name, report) => memory.observe(name, report),
      attemptBudgets: budgets, pictures,
      // A waiting job released into its queue is admitted there as a submit would be: its lineage's caps, once more.
      checkCaps: (job, jobCaps) => caps.check(job.grantId, jobCaps, 1, (excess) => admission.retryAfter(job.model, excess)),
    });
    const { states, dispatcher, failover, cancellation, sources, recovery, outputs, intake, refusals } = core;
    states.observeAttempts(new RoutingFeedback({ breakers, throughput, health, model }));
    // A succeeded job's share of its batch's compute counts against its lineage's device-seconds.
    states.observeAttempts({ ended: (ended) => {
      if (ended.status === 'succeeded' && ended.computeMs !== null) caps.charge(ended.job.grantId, ended.computeMs / Math.max(1, ended.batchSize));
    } });
    announceBreakers({ breakers, events, metrics, clock, log: log.child({ part: 'breakers' }) });
    const prober = new Prober({
      clock, hosts, breakers, health, budgets, model, models: () => registry.all(), uploadCredential,
      intervalMs: config.health.probeIntervalMs, log: log.child({ part: 'health' }), onProbed: (host, name, outcome) => metrics.probed(host, name, outcome),
    });
    // The ComfyUI pass-through: clients' requests and WebSockets relayed over the hosts' links (relay/).
    const relaySettings = config.agents.link.relays;
    const relays = new Relays({
      clock, log: log.child({ part: 'relay' }), metrics: new RelayMetrics(metrics.registry), max: relaySettings.max, idleMs: relaySettings.idleMs,
      windowBytes: relaySettings.windowBytes, chunkBytes: Math.min(relayChunkBytes(config.agents), relaySettings.windowBytes),
    });
    const hub = new AgentHub({
      clock, hosts, intake, failover, recovery, events, log: log.child({ part: 'link' }),
      heartbeatMs: config.agents.heartbeatMs, staleAfterMs: config.agents.staleAfterMs, inlineOutputBytes: config.agents.inlineOutputBytes, ackDelayMs: ACK_DELAY_MS,
      refusals,
      budget: { perSecond: config.agents.link.messagesPerSecond, burst: config.agents.link.burst, closeAfterMs: config.agents.link.overBudgetCloseMs ?? Math.min(2000, config.agents.staleAfterMs / 2) },
      onLinkClosed: (_host, reason) => metrics.linkClosed(reason),
      authorizeJoin: joinAuthorizer(authority, clock, audit),
      watchGrant: (grant, onEnd) => lifetimes.watch(grant, onEnd),
      observers: [
        { claims: (session, message) => prober.claims(session, message), lost: (session) => prober.hostLost(session) },
        // The host's own breaker counts links that drop; an agent that closes its link cleanly has shut down on purpose.
        { lost: (session, reason, abnormal) => { if (abnormal) breakers.linkLost(session.id, reason); } },
        { lost: (session, reason) => relays.lost(session, reason) },
      ],
      onLoadRefused: (host, name, error) => autoscaler.refused(host, name, error),
      relays,
    });

    // A corrupt stored blob is quarantined by the reader and reported: the metric, the log, and a mesh event.
    const blobLog = log.child({ part: 'blobs' });
    const reader = new BlobReader({
      store: blobStore, clock, onHashed: () => metrics.blobVerified(),
      onCorrupt: (digest, detail) => {
        metrics.blobIntegrityFailed(detail.check);
        blobLog.error({ digest, ...detail }, detail.quarantinedTo ? 'a stored blob failed its integrity check and was quarantined' : 'a stored blob failed its integrity check; moving it to quarantine failed');
        events.publishMesh({
          type: 'blob:corrupt', digest, check: detail.check, quarantined: detail.quarantinedTo !== null, at: new Date(clock.now()).toISOString(),
        });
      },
    });

    const reclaimer = new BlobReclaimer({
      store, commits, blobs: blobStore, locks, pictures, modelFile: (digest) => registry.all().some((registered) => modelDigests(registered.manifest).includes(digest)),
    });
    const clientBlobs = new ClientBlobs({
      store, commits, clock, blobs: blobStore, locks, reclaimer, limitBytes: config.server.uploadLimitBytes, pictures, incomingDir: join(config.data, 'blobs', 'incoming'),
    });
    const uploads = new StagedUploads({
      store, commits, clock, blobs: blobStore, dir: join(config.data, 'blobs', 'staging'), limitBytes: config.server.uploadLimitBytes,
      maxOpenPerGrant: config.uploads.maxOpenPerGrant,
    });
    // Uploads abandoned for a week are not coming back: their bytes go, at the start and every hour after; so do files
    // in the staging folder that no upload names (an older gpumesh's DELETE racing a chunk left such files).
    const sweptOrphans = (orphans: { files: number; bytes: number }): void => {
      if (orphans.files > 0) log.info(orphans, 'deleted upload files that no upload names');
    };
    const sweptUploads = await uploads.sweep(UPLOAD_MAX_AGE_MS);
    if (sweptUploads > 0) log.info({ uploads: sweptUploads }, 'deleted uploads abandoned for a week');
    sweptOrphans(await uploads.sweepOrphans());
    uploads.sweepEvery(UPLOAD_SWEEP_EVERY_MS, UPLOAD_MAX_AGE_MS, (count, error, orphans) => {
      if (error) log.warn({ err: error }, 'could not delete abandoned uploads; trying again in an hour');
      else if (count > 0) log.info({ uploads: count }, 'deleted uploads abandoned for a week');
      if (orphans) sweptOrphans(orphans);
    });
    // Finished jobs without published results go after jobs.retentionDays, and blobs nothing names with them: at the
    // start (in the background), then every 10 minutes.
    const retention = new JobRetention({ store, commits, clock, reclaimer, days: config.jobs.retentionDays });
    const retentionLog = log.child({ part: 'retention' });
    const sweptJobs = (result: SweptJobs | null, error?: unknown): void => {
      if (error) retentionLog.warn({ err: error }, 'could not delete old jobs; trying again in 10 minutes');
      else if (result && (result.jobs > 0 || result.freed > 0)) {
        retentionLog.info({ ...result, days: config.jobs.retentionDays }, result.jobs > 0 ? 'deleted finished jobs past their retention' : 'gave back blobs nothing names');
      }
    };
    void retention.sweep().then((result) => sweptJobs(result), (error: unknown) => sweptJobs(null, error));
    retention.sweepEvery(JOB_SWEEP_EVERY_MS, sweptJobs);
    // What clients do with jobs: admit them (checked against their grant), read them, cancel them; which blobs they may read.
    const visibility = new BlobVisibility({ store, registry });
    const reads = new JobReads({ store, clock, states });
    // Callbacks: a job's end POSTed, signed, to its (or its grant's) callback URL, retried until answered 2xx.
    const hooks = config.webhooks;
    const webhooks = new Webhooks({
      store, commits, clock, log: log.child({ part: 'webhooks' }),
      targets: new WebhookTargets(hooks),
      secretFor: (url) => webhookSecret(rootKey, url),
      summarize: (job) => reads.viewOf(job),
      userAgent: `gpumesh/${VERSION}`,
      settings: {
        timeoutMs: hooks.timeoutMs, maxResponseBytes: hooks.maxResponseBytes, firstRetryMs: hooks.firstRetryMs, maxRetryMs: hooks.maxRetryMs,
        giveUpAfterMs: hooks.giveUpAfterS * 1000, concurrency: hooks.concurrency, retentionMs: hooks.retentionDays * 86_400_000,
      },
    });
    states.onTerminal((job) => webhooks.jobEnded(job));
    // Workflow jobs go only to hosts whose ComfyUI has what they name; one no connected host can run is refused at submit.
    const workflowFit = new WorkflowFit(hosts);
    const jobAdmission = new JobAdmission({ store, commits, clock, config, registry, scheduler, admission, states, dispatcher, cancellation, sources, metrics, memory, pictures,
      // Looked into only while some host is out of its hours: every other job pays one pass over the hosts, no more.
      hours: (registered, classes, allowed, deadlineAt) => (anyOutOfHours(hosts)
        ? refuseBeyondHours(router.candidates(registered, classes).filter((host) => !allowed || allowed.includes(host.id)), deadlineAt) : null),
      classes: new ClassAvailability(hosts), workflows: workflowFit, blobs: visibility, caps, audit, webhooks });
    const cancels = new ClientCancel({ reads, cancellation, states });
    // A pipeline's end, told once to its callback when its last step ends (its steps' own ends are jobs' callbacks).
    const pipelineEnds = new PipelineEnds({ store, commits, log: log.child({ part: 'webhooks' }), jobs: states, webhooks });
    states.onTerminal((job) => pipelineEnds.jobEnded(job));
    const pipelines = new Pipelines({ store, clock, admission: jobAdmission, reads, cancellation, webhooks, ends: pipelineEnds });
    // Jobs that wait for a model no connected host can run (its engine missing) are said in the log and the status.
    const coverage = new ModelCoverage({ hosts, registry, routing: config.routing, events, depth: (name) => scheduler.depth(name), log: log.child({ part: 'models' }) });
    // The data folder's disk against its floor: new uploads and jobs are refused below it (http/storage-floor.ts).
    const freeSpace = new FreeSpace({
      path: config.data, minFreeBytes: config.storage.minFreeMB * 1024 * 1024, now: () => clock.now(),
      onChange: (low, disk) => {
        if (low) log.warn(disk, 'the data folder\'s disk is below its floor (storage.minFreeMB): new uploads, jobs and model adds are refused (507 STORAGE_FULL) until space is freed');
        else log.info(disk, 'the data folder\'s disk is above its floor again: new work is taken');
      },
    });
    // Front doors the owner opened to networks for clients without credentials (mesh.yaml `doors`), with their grants.
    const doors = await OpenDoors.open(config.doors, { issuer, authority, audit, data: config.data });
    const status = new MeshStatus({
      doors: () => doors.views(),
      hosts, registry, scheduler, breakers, health, throughput, counts: () => reads.counts(), storeOpen: () => store.isOpen(), blocked: (model) => coverage.blocked(model),
      placement: () => autoscaler.view(), orchestrators: options.orchestrators, wokenAt: (id) => waker.wokenAt(id), energy: () => metrics.energy(),
      storage: async () => ({
        blobs: { location: blobStore.location, ...await store.blobs.blobTotals() },
        jobs: { retentionDays: config.jobs.retentionDays, counts: await reads.counts() },
        disk: await freeSpace.view(),
      }),
      disk: () => freeSpace.view(),
    });
    // The gallery's thumbnails (kept by digest under the data folder) and its albums and deletes.
    const thumbnails = new Thumbnails({
      dir: join(config.data, 'thumbnails'),
      record: (digest) => outputs.blobRecord(digest),
      open: async (digest) => (await reader.open(digest, (await outputs.blobRecord(digest))?.bytes ?? null)).read(),
    });
    const gallery = new GalleryService({ store, commits, jobs: reads, thumbnails, reclaimer });
    // Wake-on-LAN: work that waits for a class only sleeping hosts serve wakes them.
    const wakeSettings = config.wake;
    const waker = new Waker({
      clock, log: log.child({ part: 'wake' }), hosts,
      settings: {
        broadcast: wakeSettings.broadcast, port: wakeSettings.port, everyMs: wakeSettings.everyS * 1000,
        giveUpAfterMs: wakeSettings.giveUpAfterS * 1000, recentMs: wakeSettings.recentDays * 86_400_000,
      },
      waitingClasses: () => {
        const waiting = new Set<string>();
        for (const [name, depth] of Object.entries(scheduler.depths())) {
          const registered = registry.get(name);
          if (depth === 0 || !registered) continue;
          const classes = [...new Set(registered.manifest.jobTypes.flatMap((type) => config.routing[type] ?? []))];
          const served = router.candidates(registered, classes).some((host) => host.takesWork);
          if (!served) for (const klass of classes) waiting.add(klass);
        }
        return waiting;
      },
      send: sendMagicPackets,
      woke: (host, at) => {
        const macs = hosts.info(host)?.macs?.join(', ') ?? '';
        audit.record({ event: 'host:woken', detail: `sent ${host} a Wake-on-LAN packet (${macs}) at ${wakeSettings.broadcast}:${wakeSettings.port}: work waits for it` });
        events.publishMesh({ type: 'host:waking', host, at: new Date(at).toISOString() });
      },
    });
    const explainer = new JobExplainer({ store, clock, scheduler, router, failover, model, hostInfo: (id) => hosts.info(id), hostAway: (id) => hosts.get(id)?.away ?? null, hostWokenAt: (id) => waker.wokenAt(id), sources });
    const app = await buildServer({
      admission: jobAdmission, reads, cancels, webhooks, pipelines, visibility, events, hub, status, metrics, series, gallery, thumbnails, registry, issuer, audit, outputs, reader, blobStore, explainer, uploads, clientBlobs, catalog,
      replicas: new ReplicaRequests({ autoscaler, hosts, events, clock, heartbeatMs: config.agents.heartbeatMs }),
      auth: new RequestAuth({ authority, uploads: uploadCredentials, clock, lifetimes, doors }),
      webRoot: options.webRoot ?? new URL('../../web/', import.meta.url).pathname,
      // This package (the folder above src/ or dist/), served to hosts that join with one line.
      selfPackage: new SelfPackage({ root: fileURLToPath(new URL('../../', import.meta.url)), dir: join(config.data, 'install') }),
      bodyLimitBytes: config.server.bodyLimitBytes,
      freeSpace,
      linkFrameBytes: linkFrameLimit(config.agents),
      uploadLimitBytes: config.server.uploadLimitBytes,
      relays, clock, relayIdleMs: relaySettings.idleMs,
      hosts, workflowFit, workflowRouting: { classes: config.routing.workflow, defaultModel: config.defaultModels.workflow },
    }, log, VERSION, tls);

    // Before recovery: a job it ends (or one that ended before the stop) must find its callback armed.
    const hooked = await webhooks.start(states);
    if (hooked.pending + hooked.recovered > 0) log.info(hooked, 'callbacks still to deliver are back');
    const pipelinesHooked = await pipelineEnds.start();
    if (pipelinesHooked.watched + pipelinesHooked.recovered > 0) log.info(pipelinesHooked, 'pipelines still to call back about their end are back');
    const recovered = await recovery.recover();
    if (recovered.queued + recovered.orphaned + recovered.waiting > 0) log.info(recovered, 'recovered jobs from the store');
    return new Orchestrator({
      config, log, clock, store, afterClose: options.afterClose, authority, issuer, status, hub, app, stoppables: [autoscaler, waker, core, prober, breakers, audit, series, uploads, retention, pipelineEnds, webhooks], tlsCaFingerprint: tls?.caFingerprint ?? null,
    });
  }

  /** Start listening; returns the base URL. */
  async listen(): Promise<string> {
    const { host, port } = this.config.server;
    const { app } = this.#parts;
    await app.listen({ host, port });
    const address = app.server.address();
    const actualPort = typeof address === 'object' && address ? address.port : port;
    const reachable = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
    const scheme = this.config.server.tls.enabled ? 'https' : 'http';
    this.#url = this.config.server.publicUrl ?? `${scheme}://${reachable.includes(':') ? `[${reachable}]` : reachable}:${actualPort}`;
    // Tells the CLI on this machine where the mesh listens, whatever port it got; renamed into place, so a reader
    // never sees it empty.
    const urlFile = join(this.config.data, 'orchestrator.url');
    writeFileSync(`${urlFile}.${process.pid}.tmp`, `${this.#url}\n`);
    renameSync(`${urlFile}.${process.pid}.tmp`, urlFile);
    // The same with the process that listens, so the CLI can tell a mesh that stopped from one that runs.
    writeListenFile(this.config.data, this.#url);
    return this.#url;
  }

  get url(): string {
    // An invariant: callers ask for the URL after listen().
    if (!this.#url) throw new Error('the orchestrator is not listening yet');
    return this.#url;
  }

  /** Mint a grant directly (the CLI's `up` uses this for the admin, gallery and local agent grants). */
  mint(kind: GrantKind, caveats: readonly string[] = [], note: string | null = null): string {
    return this.#parts.issuer.mintNow(kind, caveats, note).token;
  }

  /** The admin grant in `<data>/admin.grant` (mode 0600), minted on first start. */
  adminGrant(): string {
    const path = join(this.config.data, 'admin.grant');
    const token = secretFile(path, () => this.mint('admin', [], 'admin.grant'));
    try {
      this.#parts.authority.verify(token, this.#parts.clock.now());
      return token;
    } catch (error) {
      const why = error instanceof MeshError && error.code === 'GRANT_REVOKED' ? 'it was revoked' : 'was secret.key replaced?';
      throw new MeshError('SECRET_FILE_INVALID', { path, detail: `it holds a grant this mesh does not accept: ${why}` }, { cause: error });
    }
  }

  /**
   * Link an agent in this process (`gpumesh up`'s local agent) to the hub in memory instead of over a socket. Its
   * grant is checked as the link route checks a dialling agent's; its hello is checked as any other. Returns the
   * agent's end of the link (AgentOptions.connect).
   */
  connectLocalAgent(token: string): MemorySocket {
    const { authority, hub } = this.#parts;
    const now = this.#parts.clock.now();
    const grant = authority.verify(token, now);
    authority.authorize(grant, { action: 'agent:join' }, now);
    const [hubEnd, agentEnd] = MemorySocket.pair();
    // This program's own agent: no message budget (a budget guards the orchestrator from other programs).
    hub.attach(hubEnd, grant, undefined, { budgeted: false });
    return agentEnd;
  }

  get agentsConnected(): number {
    return this.#parts.status.agentsConnected;
  }

  /** Every host, as `GET /v1/hosts` shows it (`gpumesh up`'s banner says what its local agent cannot serve). */
  hosts(): HostView[] {
    return this.#parts.status.hosts();
  }

  async close(): Promise<void> {
    const { hub, stoppables, app, store, afterClose } = this.#parts;
    hub.close();
    for (const part of stoppables) part.close();
    await app.close();
    await store.close();
    await afterClose?.();
    rmSync(join(this.config.data, 'orchestrator.url'), { force: true });
    removeListenFile(this.config.data);
  }
}
