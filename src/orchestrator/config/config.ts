import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ConfigError } from '../../protocol/errors.js';
import { LINK_LIMITS } from '../../protocol/link.js';
import { parseNetwork } from '../../net/networks.js';
import { checkModelEntries } from './declared-models.js';
import { parseCertificateName } from './certificate-names.js';

/**
 * `mesh.yaml`. Every field is optional; the default is in the schema and in
 * docs/operations.md. `loadConfig` validates once at start and names the bad field.
 */
const BatchingPolicy = z.strictObject({
  /** Most jobs in one forward pass. Default 1 (no batching). */
  maxBatchSize: z.int().min(1).max(1024).default(1),
  /** Batch sizes worth waiting for; a batch is released as soon as one is reached. Default [] (only maxBatchSize). */
  preferredBatchSizes: z.array(z.int().min(1).max(1024)).default([]),
  /** How long the oldest job may wait for companions before a smaller batch is released. Default 0 ms. */
  maxQueueDelayMs: z.int().min(0).max(60_000).default(0),
});

/** A model's policy: batching, queue, retries, replicas (a `models:` entry without an engine, or `POST /v1/models`'s). */
export const ModelPolicy = z.strictObject({
  batching: BatchingPolicy.optional(),
  /** Jobs this model's queue holds before new ones get 429. Default 1000. */
  maxQueueSize: z.int().min(1).optional(),
  /** The largest `timeoutMs` a job may ask for. Default 10 minutes. */
  maxTimeoutMs: z.int().min(1).optional(),
  /** Attempts after the first when a replica fails. Default 2. */
  retries: z.int().min(0).max(10).optional(),
  /** Replicas kept loaded even with no traffic (loaded as soon as eligible hosts join). Default 0 (scale to zero). */
  minReplicas: z.int().min(0).max(1000).optional(),
  /** The most hosts the model is loaded on at once. Default: no limit (every eligible host). */
  maxReplicas: z.int().min(1).max(1000).optional(),
  /**
   * Queued plus running jobs one replica should carry; above replicas × targetInFlight the autoscaler loads the
   * model on another host. Default: twice the model's maxBatchSize (one batch running, one forming).
   */
  targetInFlight: z.int().min(1).max(100_000).optional(),
  /** How long the demand must stay lower before replicas beyond it (and beyond minReplicas) are unloaded. Default 300 s. */
  idleWindowS: z.number().min(0).max(7 * 86_400).optional(),
}).superRefine((policy, context) => {
  if (policy.minReplicas !== undefined && policy.maxReplicas !== undefined && policy.minReplicas > policy.maxReplicas) {
    context.addIssue({ code: 'custom', path: ['minReplicas'], message: `${policy.minReplicas} is above maxReplicas (${policy.maxReplicas})` });
  }
});

/**
 * One circuit breaker policy (docs/operations.md, "Breakers"). A breaker opens after `failuresToOpen` failures
 * in a row, or when more than `failureRatio` of the last `window` outcomes failed (once it has seen `minCalls`);
 * stays open `openForS`, doubling each time it reopens without having closed, up to `maxOpenForS`; then
 * half-opens and lets one trial (a health probe) through at a time; closes after `successesToClose` trials succeed.
 */
const BreakerPolicy = z.strictObject({
  /** Failures in a row that open it. Default 3. */
  failuresToOpen: z.int().min(1).max(1000).default(3),
  /** Share of failed outcomes in the window, above which it opens. Default 0.25. */
  failureRatio: z.number().gt(0).lt(1).default(0.25),
  /** Outcomes the ratio looks back over. Default 20. */
  window: z.int().min(2).max(1000).default(20),
  /** The ratio counts only once the window holds this many outcomes. Default 8. */
  minCalls: z.int().min(1).max(1000).default(8),
  /** How long it stays open the first time. Default 10 s. */
  openForS: z.number().min(0.05).max(86_400).default(10),
  /** The longest open period, however often it reopens. Default 300 s. */
  maxOpenForS: z.number().min(0.05).max(86_400).default(300),
  /** Trials that must succeed, one after another, to close it. Default 2. */
  successesToClose: z.int().min(1).max(100).default(2),
});
export type BreakerPolicy = z.output<typeof BreakerPolicy>;

/**
 * A `models:` entry. With `engine` it declares a model (a server engine's model, a command, an ONNX file): the
 * other definition fields apply, and the engine's own schema checks `settings` at start. Without it, the entry
 * only sets the policy of a model that exists (a built-in one).
 */
const ModelEntry = ModelPolicy.extend({
  /** The engine that runs it (`sdcpp`, `openai-images`, `comfyui`, `oip`, `exec`, `onnx`): declares the model. */
  engine: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,39}$/, 'an engine name (lower case letters, digits, - and _)').optional(),
  /** The job types it serves (each needs a routing entry), as `POST /v1/models` names them. Required in a declaration. */
  types: z.array(z.string().min(1).max(40)).min(1).optional(),
  /** Deprecated: the former name of `types`, still read as `types` (the orchestrator's log names each entry that uses it). */
  jobTypes: z.array(z.string().min(1).max(40)).min(1).optional(),
  /** A declared model: its version label, shown in /v1/models (default "1"). A model added at run time (`gpumesh models add`): the version a job that names only the model runs (default: the newest); while set, the API may not change the route (409 MODEL_PINNED). */
  version: z.string().min(1).max(100).optional(),
  /** A first guess of the memory it takes once loaded (MB), to place it before it has run anywhere. Default 1024. */
  memoryMB: z.int().min(1).max(10_000_000).optional(),
  /**
   * Its file, on the orchestrator's host: a path (relative to mesh.yaml's folder) or an http(s) URL. Imported into
   * the blob store at start and pulled by agents by digest; the engine gets its local path (`${MODEL_PATH}`). Default:
   * none (a server that loads its own weights, a URL the person runs).
   */
  file: z.string().min(1).optional(),
  /** The file's expected SHA-256 (`sha256:<hex>` or the hex): the import is refused if it differs. Default: not checked. */
  sha256: z.string().regex(/^(sha256:)?[0-9a-f]{64}$/, 'a SHA-256 digest: sha256:<64 hex>').optional(),
  /** Parameters the job type's input handling and the engine read: `defaultWidth`, `defaultHeight`, `defaultSteps`, `inputDim`. Default none. */
  params: z.record(z.string(), z.union([z.number(), z.string()])).optional(),
  /** The engine's settings, checked by the engine's own schema (docs/operations.md lists each engine's). Default {}. */
  settings: z.record(z.string(), z.unknown()).optional(),
});

/** Blobs in a folder under `data` (the default). */
const LocalBlobs = z.strictObject({ kind: z.literal('local') });

/**
 * Blobs in an S3-compatible bucket (AWS S3, MinIO, Garage, Ceph RGW; docs/operations.md, *Blobs in a bucket*),
 * keyed `<prefix>sha256/<2 hex>/<64 hex>`.
 */
const S3Blobs = z.strictObject({
  kind: z.literal('s3'),
  /** The bucket; it must exist. Required. */
  bucket: z.string().regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'a bucket name (3 to 63 lower-case letters, digits, "." and "-")'),
  /** Put before every key, to share a bucket: empty, or ending in "/". Default "" (keys start with sha256/). */
  prefix: z.string().max(512).regex(/^([^/].*\/)?$/, 'empty, or a key prefix that ends in "/" and does not start with one').default(''),
  /** The server's URL (MinIO, Garage, Ceph RGW: http(s)://host:port). Default: AWS's endpoint for `region`. */
  endpoint: z.url().optional(),
  /** The region to sign for. Default us-east-1 (what MinIO and Ceph answer to; Garage's is its `s3_region`, often garage). */
  region: z.string().min(1).max(64).default('us-east-1'),
  /** Address the bucket as a path (`endpoint/bucket/key`) instead of a host name. Default: true with an `endpoint`, false without. */
  forcePathStyle: z.boolean().optional(),
  /** Static credentials, both or neither. Default neither: the AWS SDK's chain (AWS_ACCESS_KEY_ID, ~/.aws, an instance role). */
  accessKeyId: z.string().min(1).optional(),
  secretAccessKey: z.string().min(1).optional(),
  /** Tries of each request to the bucket before it counts as unavailable (the SDK backs off between them). Default 3. */
  maxAttempts: z.int().min(1).max(20).default(3),
  /**
   * Send clients (not agents) straight to the bucket: `GET /v1/blobs/:digest` answers, after its grant check, a 307 to
   * a presigned GET of the object. The bytes then skip the orchestrator — and its verification on read. Default false.
   */
  presign: z.boolean().default(false),
  /** How long a presigned URL is valid (s). Default 300. */
  presignSeconds: z.int().min(1).max(7 * 24 * 3600).default(300),
}).superRefine((blobs, context) => {
  if ((blobs.accessKeyId === undefined) !== (blobs.secretAccessKey === undefined)) {
    const missing = blobs.accessKeyId === undefined ? 'accessKeyId' : 'secretAccessKey';
    context.addIssue({ code: 'custom', path: [missing], message: 'give accessKeyId and secretAccessKey together, or neither (the SDK\'s credential chain)' });
  }
});

/** The store in SQLite under `data` (the default): one orchestrator. */
const SqliteStoreConfig = z.strictObject({ kind: z.literal('sqlite') });

/**
 * The store in PostgreSQL, shared by any number of orchestrators: one runs the mesh, the others stand by and take over
 * when it stops (docs/operations.md, *Scaling out*). `GPUMESH_DATABASE_URL` sets the URL (and this kind) too.
 */
const PostgresStoreConfig = z.strictObject({
  kind: z.literal('postgres'),
  /** postgres://user:password@host:port/database. Required. */
  url: z.string().regex(/^postgres(ql)?:\/\/./, 'a postgres:// URL (postgres://user:password@host:5432/database)'),
  /** Connections each orchestrator keeps. Default 10. */
  poolSize: z.int().min(2).max(100).default(10),
  /**
   * How long the mesh lease holds without being renewed (ms; renewed every third of it). A standby takes over once it
   * has seen the lease run out for half of this more (at most about 1.8 × this after the active orchestrator stopped;
   * at once after a clean shutdown). Default 2000.
   */
  leaseMs: z.int().min(1000).max(600_000).default(2000),
});

/** The built-in models each job type uses when a job names none and mesh.yaml sets no `defaultModels`. */
const BUILTIN_DEFAULT_MODELS: Record<string, string> = { image: 'gen', video: 'gen-video', tensor: 'mlp' };

/** An address (`192.168.1.20`, `::1`) or a network in CIDR form (`192.168.1.0/24`, `fd00::/8`). */
const Network = z.string().max(60).refine((text) => parseNetwork(text) !== null, 'must be an address or a network in CIDR form (192.168.1.0/24, ::1)');

/** One door opened to networks for clients without credentials (`doors.comfyui`, `doors.a1111`). */
const OpenDoor = z.strictObject({
  /** The networks whose requests without credentials act as the door's grant. Default [] (closed: a grant is needed). */
  openTo: z.array(Network).max(64).default([]),
  /**
   * The caveats of that grant (a client grant narrowed by them: `types image`, `models sd`, `max-queued 4`, `rate 60/m`).
   * Required when `openTo` is set: an open door is a narrowed grant, never the whole mesh. Default [].
   */
  caveats: z.array(z.string().min(1).max(2000)).max(32).default([]),
}).refine((door) => door.openTo.length === 0 || door.caveats.length > 0, {
  message: 'an open door needs caveats that narrow what it may do (e.g. types image, max-queued 4)', path: ['caveats'],
});

export const MeshConfigInput = z.strictObject({
  server: z.strictObject({
    /** Default 127.0.0.1: only this machine. Use 0.0.0.0 to accept agents from other hosts. */
    host: z.string().default('127.0.0.1'),
    /** Default 7070. 0 picks a free port. */
    port: z.int().min(0).max(65535).default(7070),
    /** Largest JSON body. Default 1 MiB. */
    bodyLimitBytes: z.int().min(1024).default(1024 * 1024),
    /** Largest uploaded output. Default 256 MiB. */
    uploadLimitBytes: z.int().min(1024).default(256 * 1024 * 1024),
    /** Base URL clients and agents use to reach this orchestrator; default http://<host>:<port>. */
    publicUrl: z.url().optional(),
    /** HTTPS with the mesh's own private CA, made on first start under <data>/tls. Default off: plain HTTP (fine on loopback). */
    tls: z.strictObject({
      /** Serve HTTPS, and agents link over wss:. Default false. */
      enabled: z.boolean().default(false),
      /**
       * Extra host names and IP addresses the server certificate covers. Default []; it always covers
       * localhost, 127.0.0.1, ::1, `host` (this machine's name when that is 0.0.0.0 or ::) and publicUrl's host.
       */
      names: z.array(z.string().refine((text) => typeof parseCertificateName(text) !== 'string', 'must be a host name or an IP address')).default([]),
    }).prefault({}),
  }).prefault({}),
  /** Where the SQLite store and blobs live. Default: the CLI's data folder (--data, $GPUMESH_HOME, ./.gpumesh where it exists, else the platform's). */
  data: z.string().optional(),
  /** Where jobs, grants and results are recorded: `{kind: sqlite}` under `data` (default), or `{kind: postgres, url}`, shared by several orchestrators. */
  store: z.discriminatedUnion('kind', [SqliteStoreConfig, PostgresStoreConfig]).default({ kind: 'sqlite' }),
  /** Where blobs (outputs, pictures, model files) are kept: `{kind: local}` under `data` (default), or `{kind: s3, bucket, …}`. */
  blobs: z.discriminatedUnion('kind', [LocalBlobs, S3Blobs]).default({ kind: 'local' }),
  /**
   * Job type → the host classes that may run it, in order of preference: the first class with a usable replica
   * wins, later ones are fallbacks. Default: each type to the class of the same name, `ocr` to the `tensor` class
   * (two ONNX models run where tensor models run) and `workflow` (a client's whole ComfyUI workflow) to `image`.
   */
  routing: z.record(z.string(), z.array(z.string()).min(1)).default({ image: ['image'], video: ['video'], tensor: ['tensor'], ocr: ['tensor'], workflow: ['image'] }),
  /** Job type → the model used when a job names none. Default: gen for image, gen-video for video, mlp for tensor (for the types `routing` names). */
  defaultModels: z.record(z.string(), z.string()).default(BUILTIN_DEFAULT_MODELS),
  /** Models declared here (with `engine`), and policies merged over each model's defaults. */
  models: z.record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, 'a model name (letters, digits, ".", "-" and "_")'), ModelEntry).default({}),
  queues: z.strictObject({
    /** Jobs queued across all models before new ones get 429. Default 10000. */
    maxTotal: z.int().min(1).default(10_000),
  }).prefault({}),
  priorities: z.strictObject({
    /** Levels 1 (highest) to `levels`. Default 3. */
    levels: z.int().min(1).max(100).default(3),
    /** The level of a job that names none. Default 2. */
    default: z.int().min(1).default(2),
    /** A queued job moves up one level for each `agingMs` it waits, so low levels are never starved. Default 30 s. */
    agingMs: z.int().min(1).default(30_000),
  }).prefault({}),
  agents: z.strictObject({
    /** How often agents report. Default 2 s. */
    heartbeatMs: z.int().min(100).default(2000),
    /** A link silent for this long is dropped and its work fails over. Default 3 heartbeats. */
    staleAfterMs: z.int().min(300).default(6000),
    /** After a restart, how long dispatched jobs wait for their agent to reconnect and claim them. Default 10 s. */
    reconnectGraceMs: z.int().min(0).default(10_000),
    /**
     * Outputs up to this many bytes (all files of one job together) travel inside the agent's `done` report,
     * saving an upload round trip; larger ones are uploaded over HTTP. 0 uploads everything. Default 256 KiB.
     */
    inlineOutputBytes: z.int().min(0).max(2 * 1024 * 1024).default(256 * 1024),
    /** What one agent link may cost the orchestrator (see docs/operations.md, *Agent links*). */
    link: z.strictObject({
      /**
       * The largest frame an agent may send (bytes); a larger one closes its link (1009) before it is read.
       * Default: room for the largest inline output (inlineOutputBytes as base64) and 1 MiB besides.
       */
      maxFrameBytes: z.int().min(64 * 1024).max(256 * 1024 * 1024).optional(),
      /** Messages a second each link may send on average; beyond its allowance they are dropped unread. Default 10,000. */
      messagesPerSecond: z.int().min(1).default(10_000),
      /** Messages a link may send at once, above that average. Default 20,000. */
      burst: z.int().min(1).default(20_000),
      /**
       * A link that keeps exceeding its allowance this long is closed (4429) and counted in /metrics. Default 2 s, or
       * half of staleAfterMs when that is less: a flood's dropped messages are not read, so they do not keep the link
       * alive, and on short stale settings the flooder would otherwise be dropped as silent — the right outcome under
       * the wrong name in the metrics and the log.
       */
      overBudgetCloseMs: z.int().min(0).optional(),
      /** The ComfyUI pass-through's relays over each link (docs/operations.md, *The ComfyUI pass-through*). */
      relays: z.strictObject({
        /**
         * Relays (a client's HTTP request, or WebSocket, to a host's ComfyUI) one link carries at once; a client past
         * it is answered 503 RELAY_UNAVAILABLE with Retry-After. Each holds at most `windowBytes` each way. Default 32.
         */
        max: z.int().min(1).max(LINK_LIMITS.relays).default(32),
        /** Bytes either side of a relay may send ahead of the other's credit: what a relay holds in memory, each way. Default 1 MiB. */
        windowBytes: z.int().min(64 * 1024).max(LINK_LIMITS.relayChunkBytes * 64).default(1024 * 1024),
        /**
         * An HTTP relay that moves no byte either way for this long is ended (before its answer: 502 RELAY_FAILED); a
         * WebSocket relay whose client answers no ping for this long is closed (1011). Default 2 min.
         */
        idleMs: z.int().min(1000).default(120_000),
      }).prefault({}),
    }).prefault({}),
  }).prefault({}),
  batching: z.strictObject({
    /**
     * A partial batch (below its preferred size) on an idle replica: `while-arriving` holds it back for up to the
     * model's maxQueueDelayMs only while the arrival rate promises company in that time, else sends it at once;
     * `always` holds it for the whole delay (the older rule). Default while-arriving.
     */
    holdPartial: z.enum(['while-arriving', 'always']).default('while-arriving'),
  }).prefault({}),
  scheduling: z.strictObject({
    /**
     * A batch that would make a host swap models (no room for both): `batch-before-swap` first sends the batches
     * ready for the model the host holds, for at most `maxSwapHoldMs`; `lru` sends it at once and the agent evicts
     * its least recently used idle model. Default batch-before-swap.
     */
    swapPolicy: z.enum(['batch-before-swap', 'lru']).default('batch-before-swap'),
    /** The longest a host keeps its model for ready batches while another model waits to be swapped in. Default 5 s. */
    maxSwapHoldMs: z.int().min(0).max(600_000).default(5000),
  }).prefault({}),
  retry: z.strictObject({
    /** Backoff before the first retry; doubles per attempt. Default 250 ms. */
    backoffMs: z.int().min(0).default(250),
  }).prefault({}),
  gallery: z.strictObject({
    /** How long the grant in the gallery link `gpumesh up` prints lasts (it travels in a URL). Default 12h. */
    grantTtl: z.string().regex(/^\d+(s|m|h|d)$/, 'a duration such as 90m, 12h or 7d').default('12h'),
    /** The albums the gallery grant may submit to and read. Default [default]. */
    albums: z.array(z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/i)).min(1).default(['default']),
  }).prefault({}),
  jobs: z.strictObject({
    /**
     * Finished jobs that no published result names (failed, cancelled, expired, tensor and OIP jobs, jobs whose
     * results were deleted) are deleted this many days after they finished, with their attempts and the blobs only
     * they named. Jobs with results in the gallery stay while their results do. 0 keeps every job. Default 30.
     */
    retentionDays: z.int().min(0).max(36_500).default(30),
  }).prefault({}),
  uploads: z.strictObject({
    /**
     * Resumable uploads one grant lineage may have open at once (started, not yet completed or given up): each holds
     * up to `server.uploadLimitBytes` of disk until then. One more is 429 TOO_MANY_UPLOADS. Default 32.
     */
    maxOpenPerGrant: z.int().min(1).max(100_000).default(32),
  }).prefault({}),
  storage: z.strictObject({
    /**
     * The free space (MB) the data folder's filesystem keeps: below it the orchestrator refuses new uploads, jobs and
     * model adds with 507 STORAGE_FULL before writing anything (jobs already accepted run on, reads and deletes go
     * on), and takes them again by itself once there is more. 0: no floor (a write that meets a full disk is still a
     * 507). Default 512.
     */
    minFreeMB: z.int().min(0).max(10_000_000).default(512),
  }).prefault({}),
  audit: z.strictObject({
    /** Audit entries older than this are deleted. Default 30 days. */
    retentionDays: z.int().min(1).max(3650).default(30),
    /** At most this many entries are kept (the newest). Default 100000. */
    maxRows: z.int().min(100).default(100_000),
  }).prefault({}),
  breakers: z.strictObject({
    /** One breaker per host × model: failures of batches of that model on that host. */
    replica: BreakerPolicy.prefault({}),
    /** One per host: its link dropping (socket closed, heartbeats stopped). */
    host: BreakerPolicy.prefault({}),
  }).prefault({}),
  health: z.strictObject({
    /**
     * Each resident model that has had no successful batch for this long gets a probe: one tiny job through
     * the normal path. 0 turns scheduled probes off (breakers still use probes as their half-open trials). Default 30 s.
     */
    probeIntervalMs: z.int().min(0).default(30_000),
    attemptTimeout: z.strictObject({
      /** An attempt may take this many times the model's measured run time on its host. Default 5. */
      factor: z.number().min(1).max(1000).default(5),
      /** …but never less than this. Default 10 s. */
      floorMs: z.int().min(50).default(10_000),
      /** Added while the model was not resident when the batch was sent (pull and load). Default 120 s. */
      loadMs: z.int().min(0).default(120_000),
    }).prefault({}),
  }).prefault({}),
  autoscaler: z.strictObject({
    /**
     * How often the autoscaler looks at every model's demand and replicas (it also looks at once when jobs are
     * queued, hosts join or leave, and models load or unload). Default 1 s.
     */
    intervalMs: z.int().min(50).max(60_000).default(1000),
  }).prefault({}),
  /**
   * Wake-on-LAN for hosts that sleep: when jobs wait for a class only sleeping hosts serve (they announced their MAC
   * addresses: host config `wake.announce`), a magic packet goes to each (docs/operations.md, *Machines people also use*).
   */
  wake: z.strictObject({
    /** Where the packets go: a broadcast address of the hosts' network. Default 255.255.255.255. */
    broadcast: z.string().min(1).default('255.255.255.255'),
    /** UDP port. Default 9 (discard), as most Wake-on-LAN senders use. */
    port: z.int().min(1).max(65_535).default(9),
    /** At most one packet per host this often while work waits for it. Default 60 s. */
    everyS: z.number().min(1).default(60),
    /** Stop sending after this long without the host coming (until work waits for it afresh). Default 10 min. */
    giveUpAfterS: z.number().min(1).default(600),
    /** Only hosts seen within this many days are woken. Default 14. */
    recentDays: z.number().min(0).default(14),
  }).prefault({}),
  /**
   * Callbacks (webhooks): where a job's or a pipeline's end may be POSTed, signed (docs/api.md, *Webhooks*). This is a
   * request the orchestrator makes from inside the owner's network, so nothing is allowed until listed here, and
   * loopback and private addresses stay refused unless said below — checked on the addresses the host name resolves
   * to and the connection is made to, not on the name.
   */
  webhooks: z.strictObject({
    /**
     * The callback URLs allowed, as prefixes: `https://hooks.example.com/gpumesh/` allows that scheme, host and port
     * (the scheme's default when none is written) and every path under it. Default [] (no callbacks).
     */
    allow: z.array(z.url({ protocol: /^https?$/ })).default([]),
    /** Allow callbacks to loopback addresses (127.0.0.0/8, ::1): the orchestrator's own machine. Default false. */
    allowLoopback: z.boolean().default(false),
    /**
     * Allow callbacks to private, link-local and shared addresses (10/8, 172.16/12, 192.168/16, 100.64/10,
     * 169.254/16 — cloud metadata —, fc00::/7, fe80::/10): the network the orchestrator sits in. Default false.
     */
    allowPrivate: z.boolean().default(false),
    /** One try may take this long, answer included. Default 10 s. */
    timeoutMs: z.int().min(100).max(120_000).default(10_000),
    /** The most of an answer read back; a longer one is cut off (a 2xx still counts). Default 65536 bytes. */
    maxResponseBytes: z.int().min(0).max(16 * 1024 * 1024).default(65_536),
    /** The wait before the first retry; each next one doubles, with jitter. Default 5 s. */
    firstRetryMs: z.int().min(10).max(3_600_000).default(5_000),
    /** No wait between retries is longer. Default 1 h. */
    maxRetryMs: z.int().min(10).max(86_400_000).default(3_600_000),
    /** A delivery not answered 2xx this long after its event is given up (`failed`). Default 24 h. */
    giveUpAfterS: z.number().min(1).max(30 * 86_400).default(86_400),
    /** Tries in flight at once. Default 4. */
    concurrency: z.int().min(1).max(256).default(4),
    /** Ended deliveries are forgotten after this many days. Default 30. */
    retentionDays: z.int().min(1).max(3650).default(30),
  }).prefault({}),
  /**
   * The front doors for clients that speak another project's API (docs/api.md): ComfyUI's (`/prompt`, `/ws`, …) and
   * AUTOMATIC1111's (`/sdapi/v1/…`). Each takes a grant as a Bearer token or as the password of HTTP Basic. For
   * clients that cannot send one, the owner may open a door to named networks: a request there without credentials
   * acts as a grant the orchestrator mints with the caveats below. Off by default (deny by default).
   */
  doors: z.strictObject({
    comfyui: OpenDoor.prefault({}),
    a1111: OpenDoor.prefault({}),
  }).prefault({}),
});
export type MeshConfigInput = z.input<typeof MeshConfigInput>;

/** Where a model's replicas may number, and when the autoscaler adds or removes one. */
export interface ReplicaPolicy {
  min: number;
  /** null: no limit (every eligible host). */
  max: number | null;
  targetInFlight: number;
  idleWindowMs: number;
}

export interface ResolvedModelPolicy {
  batching: { maxBatchSize: number; preferredBatchSizes: number[]; maxQueueDelayMs: number };
  maxQueueSize: number;
  maxTimeoutMs: number;
  retries: number;
  replicas: ReplicaPolicy;
}

/** A `models:` entry as resolved: its job types under `types`, whichever name the file gave them. */
export type ModelEntry = Omit<z.output<typeof ModelEntry>, 'jobTypes'>;
export type S3BlobsConfig = z.output<typeof S3Blobs>;
export type PostgresStoreSettings = z.output<typeof PostgresStoreConfig>;

export type MeshConfig = Omit<z.output<typeof MeshConfigInput>, 'data' | 'models'> & {
  data: string;
  /** Models declared (with `engine`; their `file` paths made absolute) and policy overrides; `policyFor` merges policies over model defaults. */
  models: Record<string, ModelEntry>;
  /** Fields the file gave by a deprecated name, read under the current one: the orchestrator says each in its log. */
  deprecated?: DeprecatedField[];
};

/** A field given by its former name (`models.sd.jobTypes`), and the name it is read as (`models.sd.types`). */
export interface DeprecatedField {
  field: string;
  use: string;
}

/** A model's defaults before the config's overrides; targetInFlight is derived from the batch size unless given. */
export type ModelPolicyDefaults = Partial<Omit<ResolvedModelPolicy, 'replicas'>> & { replicas?: Partial<ReplicaPolicy> };

const MODEL_POLICY_DEFAULTS: Omit<ResolvedModelPolicy, 'replicas'> & { replicas: Omit<ReplicaPolicy, 'targetInFlight'> } = {
  batching: { maxBatchSize: 1, preferredBatchSizes: [], maxQueueDelayMs: 0 },
  maxQueueSize: 1000,
  maxTimeoutMs: 10 * 60_000,
  retries: 2,
  replicas: { min: 0, max: null, idleWindowMs: 300_000 },
};

/** Merge a model's own defaults and the config's overrides into one resolved policy. */
export function policyFor(config: MeshConfig, model: string, modelDefaults: ModelPolicyDefaults = {}): ResolvedModelPolicy {
  const base = { ...MODEL_POLICY_DEFAULTS, ...modelDefaults };
  const override = config.models[model] ?? {};
  const batching = { ...base.batching, ...override.batching };
  const replicas = { ...MODEL_POLICY_DEFAULTS.replicas, ...modelDefaults.replicas };
  return {
    batching,
    maxQueueSize: override.maxQueueSize ?? base.maxQueueSize,
    maxTimeoutMs: override.maxTimeoutMs ?? base.maxTimeoutMs,
    retries: override.retries ?? base.retries,
    replicas: {
      min: override.minReplicas ?? replicas.min,
      max: override.maxReplicas ?? replicas.max,
      targetInFlight: override.targetInFlight ?? replicas.targetInFlight ?? 2 * batching.maxBatchSize,
      idleWindowMs: override.idleWindowS !== undefined ? Math.round(override.idleWindowS * 1000) : replicas.idleWindowMs,
    },
  };
}

/** TLS settings that only make sense together; also run after command-line flags change them. */
export function checkTlsSettings(server: { publicUrl?: string; tls: { enabled: boolean; names: string[] } }): void {
  if (server.tls.enabled && server.publicUrl && !server.publicUrl.startsWith('https:')) {
    throw new ConfigError(`invalid mesh config:\n  server.publicUrl: ${server.publicUrl} must be https:// when TLS is on (--tls, server.tls.enabled)`);
  }
  for (const name of server.tls.names) {
    const parsed = parseCertificateName(name);
    if (typeof parsed === 'string') throw new ConfigError(`invalid mesh config:\n  server.tls.names: ${parsed}`);
  }
  if (!server.tls.enabled && server.tls.names.length > 0) {
    throw new ConfigError('invalid mesh config:\n  server.tls.names: certificate names need TLS on (--tls, server.tls.enabled: true)');
  }
}

/**
 * Validate a config object; the error names every bad field by its path. Relative model `file` paths are
 * resolved against `baseDir` (the folder of mesh.yaml; default the working directory).
 */
export function resolveConfig(input: unknown, dataDefault: string, baseDir = process.cwd()): MeshConfig {
  const parsed = MeshConfigInput.safeParse(input ?? {});
  if (!parsed.success) {
    // A bad record key (a model name) carries why in its own issues.
    const why = (issue: z.core.$ZodIssue): string => (issue.code === 'invalid_key' && issue.issues[0] ? `${issue.issues[0].message}` : issue.message);
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.') || '(root)'}: ${why(issue)}`);
    throw new ConfigError(`invalid mesh config:\n  ${problems.join('\n  ')}`);
  }
  const config = parsed.data;
  if ((input as { defaultModels?: unknown } | null)?.defaultModels === undefined) {
    // The built-in defaults cover only the job types this mesh routes: `routing: {image: [image, cloud]}` alone is a
    // whole config, not an error about a tensor default nobody wrote.
    config.defaultModels = Object.fromEntries(Object.entries(config.defaultModels).filter(([type]) => config.routing[type]));
  }
  if (config.priorities.default > config.priorities.levels) {
    throw new ConfigError(`invalid mesh config:\n  priorities.default: ${config.priorities.default} is beyond priorities.levels (${config.priorities.levels})`);
  }
  checkTlsSettings(config.server);
  for (const [name, policy] of Object.entries(config.breakers)) {
    if (policy.minCalls > policy.window) {
      throw new ConfigError(`invalid mesh config:\n  breakers.${name}.minCalls: ${policy.minCalls} is more than breakers.${name}.window (${policy.window})`);
    }
    if (policy.maxOpenForS < policy.openForS) {
      throw new ConfigError(`invalid mesh config:\n  breakers.${name}.maxOpenForS: ${policy.maxOpenForS} is less than breakers.${name}.openForS (${policy.openForS})`);
    }
  }
  if (config.webhooks.maxRetryMs < config.webhooks.firstRetryMs) {
    throw new ConfigError(`invalid mesh config:\n  webhooks.maxRetryMs: ${config.webhooks.maxRetryMs} is less than webhooks.firstRetryMs (${config.webhooks.firstRetryMs})`);
  }
  for (const [type, model] of Object.entries(config.defaultModels)) {
    if (!config.routing[type]) throw new ConfigError(`invalid mesh config:\n  defaultModels.${type}: job type "${type}" has no routing entry`);
    if (!model) throw new ConfigError(`invalid mesh config:\n  defaultModels.${type}: empty model name`);
  }
  const deprecated: DeprecatedField[] = [];
  const named = Object.fromEntries(Object.entries(config.models).map(([name, entry]) => [name, withTypes(name, entry, deprecated)]));
  const problems = checkModelEntries(named, config.routing, (name) => (deprecated.some((entry) => entry.field === `models.${name}.jobTypes`) ? 'jobTypes' : 'types'));
  if (problems.length > 0) throw new ConfigError(`invalid mesh config:\n  ${problems.join('\n  ')}`);
  const models = Object.fromEntries(Object.entries(named).map(([name, entry]) => [name, withAbsoluteFile(entry, baseDir)]));
  return { ...config, models, data: resolve(config.data ?? dataDefault), ...(deprecated.length > 0 ? { deprecated } : {}) };
}

/** Read and validate a YAML config file. */
export function loadConfigFile(path: string, dataDefault: string): MeshConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(`cannot read config ${path}: ${(error as Error).message}`);
  }
  let document: unknown;
  try {
    document = parseYaml(text);
  } catch (error) {
    throw new ConfigError(`config ${path} is not valid YAML: ${(error as Error).message}`);
  }
  return resolveConfig(document, dataDefault, dirname(resolve(path)));
}

/**
 * An entry's job types under `types`: mesh.yaml once called them `jobTypes`, which is still read (and noted in
 * `deprecated`, for the log); both at once is an error, since they could disagree.
 */
function withTypes(name: string, entry: z.output<typeof ModelEntry>, deprecated: DeprecatedField[]): ModelEntry {
  const { jobTypes, ...rest } = entry;
  if (jobTypes === undefined) return rest;
  if (rest.types !== undefined) {
    throw new ConfigError(`invalid mesh config:\n  models.${name}.jobTypes: give the job types once, as models.${name}.types (jobTypes is its former name)`);
  }
  deprecated.push({ field: `models.${name}.jobTypes`, use: `models.${name}.types` });
  return { ...rest, types: jobTypes };
}

/** A model file given as a relative path is relative to mesh.yaml's folder; a URL stays as it is. */
function withAbsoluteFile(entry: ModelEntry, baseDir: string): ModelEntry {
  if (entry.file === undefined || /^https?:\/\//i.test(entry.file)) return entry;
  return { ...entry, file: resolve(baseDir, entry.file) };
}

/**
 * The most bytes one relay piece carries (before base64): what fits the frame limit with room for the message around it,
 * at most the protocol's LINK_LIMITS.relayChunkBytes.
 */
export function relayChunkBytes(agents: Pick<MeshConfig['agents'], 'inlineOutputBytes' | 'link'>): number {
  return Math.min(LINK_LIMITS.relayChunkBytes, Math.floor(((linkFrameLimit(agents) - 4096) * 3) / 4));
}

/** The largest frame an agent may send: `agents.link.maxFrameBytes`, else room for the largest inline output and 1 MiB. */
export function linkFrameLimit(agents: Pick<MeshConfig['agents'], 'inlineOutputBytes' | 'link'>): number {
  return agents.link.maxFrameBytes ?? Math.ceil((agents.inlineOutputBytes * 4) / 3) + 1024 * 1024;
}

/** A policy as given (a model added at run time) as the defaults its model version starts from. */
export function policyDefaultsOf(policy: z.output<typeof ModelPolicy>): ModelPolicyDefaults {
  const replicas: Partial<ReplicaPolicy> = {};
  if (policy.minReplicas !== undefined) replicas.min = policy.minReplicas;
  if (policy.maxReplicas !== undefined) replicas.max = policy.maxReplicas;
  if (policy.targetInFlight !== undefined) replicas.targetInFlight = policy.targetInFlight;
  if (policy.idleWindowS !== undefined) replicas.idleWindowMs = Math.round(policy.idleWindowS * 1000);
  return {
    ...(policy.batching ? { batching: policy.batching } : {}),
    ...(policy.maxQueueSize !== undefined ? { maxQueueSize: policy.maxQueueSize } : {}),
    ...(policy.maxTimeoutMs !== undefined ? { maxTimeoutMs: policy.maxTimeoutMs } : {}),
    ...(policy.retries !== undefined ? { retries: policy.retries } : {}),
    replicas,
  };
}
