import { z } from 'zod';
import { ModelManifest } from './models.js';
import { NodeCatalogue } from './workflows.js';

/**
 * The agent link: JSON messages over one WebSocket that the agent dials.
 * This file is the whole vocabulary; a new message is added here and nowhere else.
 */
/**
 * Bumped whenever a message or field is added, removed or changes meaning in a
 * way an older peer would reject or misread (docs/architecture.md, "The agent link").
 * 2: heartbeats no longer carry `inFlight`; `hello.inFlight` also lists finished, unacknowledged results;
 *    `run` carries one upload credential for the batch; `welcome` says how large an output may travel inline in `done`.
 * 3: model manifests have no `pipeline` (the ONNX engine's is in its `settings`) and say whether there is a `file`
 *    to pull; the agent announces `loading` while a batch waits for its model, and `started` says how long that took.
 *    The orchestrator places replicas with `load`, `unload` and `drain`; the agent answers `load-refused` and announces
 *    `draining`, and its hello may list what is `resident` and say it is `draining` (all added to 3 while it was
 *    still unreleased, so no peer speaks 3 without them).
 */
export const LINK_PROTOCOL_VERSION = 3;
export const LINK_PATH = '/v1/agents/link';

/**
 * What one agent message may hold at most: the most a legitimate agent needs (a batch is at most 1,024 jobs, the
 * largest `maxBatchSize`; a host runs at most 64 batches at once). A message beyond them is malformed (close 1008)
 * before any of it is acted on; the orchestrator's `agents.link.maxFrameBytes` bounds a frame's bytes before it is
 * parsed.
 */
export const LINK_LIMITS = {
  /** An id (job, batch, host, model) or a digest. */
  idChars: 200,
  /** Jobs one `loading`, `started` or `progress` names: one batch's. */
  jobIdsPerMessage: 1024,
  /** Batches an agent runs at once (`concurrency`). */
  concurrency: 64,
  /** Jobs a hello says the agent holds: every batch it may run, full. */
  heldJobs: 64 * 1024,
  /** Models resident, model files cached, devices, classes, engines. */
  listItems: 1024,
  /** Files one result carries. */
  artifactsPerResult: 256,
  /** A preview picture (PNG, base64): a small picture of the work so far, not a result. */
  previewChars: 1024 * 1024,
  /**
   * Pass-through relays (a client's HTTP request or WebSocket to a host's ComfyUI) one link carries at once: the
   * orchestrator opens no more (`agents.link.relays.max`, at most this), and an agent refuses any beyond it.
   */
  relays: 256,
  /** The bytes one relay chunk carries at most, before base64 (the orchestrator names a smaller size where its frame limit asks). */
  relayChunkBytes: 256 * 1024,
  /** Headers of one relayed request or answer, and the characters of one header's name and value. */
  relayHeaders: 100,
  relayHeaderChars: 8192,
  /** A relayed request's path and query. */
  relayPathChars: 8192,
} as const;

const Id = z.string().max(LINK_LIMITS.idChars);
/** base64 of at most `bytes` bytes. */
const base64Chars = (bytes: number): number => Math.ceil(bytes / 3) * 4;
const JobIds = z.array(Id).max(LINK_LIMITS.jobIdsPerMessage);
const list = <T extends z.ZodType>(item: T) => z.array(item).max(LINK_LIMITS.listItems);

/** An agent's error; codes it may send are the registry's, and an unknown one is read as ENGINE_FAILED. */
const ErrorBody = z.object({ code: z.string().max(64), message: z.string().max(4000) });

export const Device = z.object({
  id: Id,
  kind: z.enum(['gpu', 'cpu']),
  name: z.string().max(LINK_LIMITS.idChars),
  memoryTotalMB: z.number(),
  budgetMB: z.number(),
  usedMB: z.number(),
  /** A GPU's temperature (°C), power draw and power limit (W) as its driver last said; absent where it says nothing. */
  temperatureC: z.number().nullable().optional(),
  powerW: z.number().nullable().optional(),
  powerLimitW: z.number().nullable().optional(),
});
export type Device = z.infer<typeof Device>;

/**
 * A host that is linked and takes no work now, and why: its owner is using the machine (`yielded`), it is outside
 * its hours (`off-hours`), or its GPUs are over their temperature or power limit (`hot`) — or it is about to sleep
 * (`asleep`, said just before it leaves, so its absence reads as sleep, not a loss). `since` and `until` are epoch ms;
 * `until` is when it expects to take work again (its next window), null when it cannot say.
 */
export const HostAway = z.object({
  state: z.enum(['yielded', 'off-hours', 'hot', 'asleep']),
  reason: z.string().max(500),
  since: z.number(),
  until: z.number().nullable(),
});
export type HostAway = z.infer<typeof HostAway>;

export const ResidentModel = z.object({
  model: Id,
  digest: Id,
  device: Id,
  memoryMB: z.number(),
  lastUsedAt: z.number(),
});
export type ResidentModel = z.infer<typeof ResidentModel>;

/**
 * A program the agent runs beside its engines (ffmpeg), as found at its start: where, from where — the system's
 * (`PATH`), the one shipped in gpumesh's npm dependencies (`package`), or the one `GPUMESH_FFMPEG` names
 * (`configured`) — and its version line. Shown by `gpumesh status`.
 */
export const ToolReport = z.object({
  name: Id,
  path: z.string().max(4096),
  source: z.enum(['system', 'package', 'configured']),
  version: z.string().max(LINK_LIMITS.idChars),
});
export type ToolReport = z.infer<typeof ToolReport>;

/** A class the host was asked to serve and cannot (`video` without ffmpeg), and why, in one sentence. */
export const UnavailableClass = z.object({ class: Id, reason: z.string().max(2000) });
export type UnavailableClass = z.infer<typeof UnavailableClass>;

export const ArtifactReport = z.object({
  digest: Id,
  mediaType: z.string().max(LINK_LIMITS.idChars),
  bytes: z.number(),
  width: z.number().optional(),
  height: z.number().optional(),
  /** The bytes themselves, base64, for an output small enough to travel in the report instead of a separate upload. */
  inline: z.string().optional(),
});
export type ArtifactReport = z.infer<typeof ArtifactReport>;

/**
 * Where a load's time went, measured on the agent (ms): the model file pulled into its cache, idle models evicted to
 * make room, the engine's process started (`spawnMs`: the fork or exec until it runs) and ready (`readyMs`: a worker
 * booted and reported ready, a server's readiness check passed — a server loads its model before it is ready), and the
 * model loaded inside the engine (`initMs`: a session built). Spawn and ready are absent when the load reused a running
 * process. The load's whole wait (`loadMs`) less these is the agent's own share. Optional wherever it travels (on
 * `started` and in `done`'s timings): an older peer ignores it, so the link protocol version is unchanged.
 */
export const LoadPhases = z.object({
  pullMs: z.number().min(0),
  evictMs: z.number().min(0),
  spawnMs: z.number().min(0).optional(),
  readyMs: z.number().min(0).optional(),
  initMs: z.number().min(0),
});
export type LoadPhases = z.infer<typeof LoadPhases>;

export const Timings = z.object({
  /** Time spent making the model resident for this batch (0 when it already was). */
  loadMs: z.number(),
  /** Time inside the engine for the whole batch. */
  computeMs: z.number(),
  /** From the agent receiving `run` to this report. */
  totalMs: z.number(),
  /** Where `loadMs` went, when the batch waited for a load (see LoadPhases). */
  phases: LoadPhases.optional(),
});
export type Timings = z.infer<typeof Timings>;

/**
 * The memory a batch measured on the agent, so the orchestrator can learn
 * what a model really needs (its estimator: see scheduler/memory.ts). Added
 * to `done` as an optional field: older orchestrators ignore it, older agents
 * leave it out, so the link protocol version is unchanged.
 */
export const BatchMemoryReport = z.object({
  /** What the model took to load, measured (MB). */
  residentMB: z.number().min(0),
  /**
   * The most the model held during the batch, its resident memory included
   * (MB). Present only when the batch was the largest the model had run since
   * it loaded: a smaller one runs in memory the model already holds, and its
   * peak says nothing about its own need.
   */
  peakMB: z.number().min(0).optional(),
  /** Pixels per job (width × height; 1 for a job without an image size). */
  pixels: z.number().int().min(1),
  batchSize: z.number().int().min(1),
});
export type BatchMemoryReport = z.infer<typeof BatchMemoryReport>;

/** The pixels of one job, the unit memory grows with: width × height where the input has both, else 1. */
export function pixelsOf(input: Record<string, unknown>): number {
  const { width, height } = input;
  return typeof width === 'number' && typeof height === 'number' && width > 0 && height > 0 ? Math.round(width * height) : 1;
}

/**
 * Pass-through relays (docs/architecture.md, "The ComfyUI pass-through"): the orchestrator asks an agent to make one
 * HTTP request, or open one WebSocket, to the ComfyUI a model of its host runs, for a client; the bytes travel both
 * ways in chunks. Flow control is by credit: a side sends at most the relay's window of bytes the other has not yet
 * credited back, and credits what it received once it handed it on (written to the client's socket, to ComfyUI's), so
 * a slow reader stops the writer and memory stays bounded whatever the body's size. Both ends end a relay with
 * `relay-close`; a link that drops ends all of its relays. Relays are opened only with hosts whose hello named models
 * they pass through (`passthrough`), so an agent that knows none of these messages is never sent one.
 */
const RelayId = z.string().min(1).max(64);
/** Headers as `[name, value]` pairs, in order (a name may repeat). */
export const RelayHeaders = z.array(z.tuple([z.string().min(1).max(256), z.string().max(LINK_LIMITS.relayHeaderChars)])).max(LINK_LIMITS.relayHeaders);
export type RelayHeaders = z.infer<typeof RelayHeaders>;

/** What the relay asks of the ComfyUI: one HTTP request, or a WebSocket. `path` is its path and query (`/view?filename=…`). */
export const RelayRequest = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('http'),
    method: z.string().min(1).max(16).regex(/^[A-Z]+$/),
    path: z.string().startsWith('/').max(LINK_LIMITS.relayPathChars),
    headers: RelayHeaders,
    /** A body follows in `relay-data` (the last with `end`); false: none. */
    body: z.boolean(),
  }),
  z.object({
    kind: z.literal('ws'),
    path: z.string().startsWith('/').max(LINK_LIMITS.relayPathChars),
    headers: RelayHeaders,
  }),
]);
export type RelayRequest = z.infer<typeof RelayRequest>;

/**
 * Bytes of a relay, either way: a piece of an HTTP body (`end` on the last, which may be empty), or of a WebSocket
 * message (`binary` or text; `fin` false while more pieces of the same message follow).
 */
const RelayData = z.object({
  type: z.literal('relay-data'),
  relayId: RelayId,
  data: z.string().max(base64Chars(LINK_LIMITS.relayChunkBytes)),
  /**
   * Where the piece starts in the relay's bytes this way (its body, or its WebSocket messages one after another): a
   * receiver that finds a piece missing before it (a message the link's budget dropped) fails the relay rather than
   * hand on bytes with a hole.
   */
  at: z.int().min(0),
  end: z.boolean().optional(),
  binary: z.boolean().optional(),
  fin: z.boolean().optional(),
});
/** The receiver handed on this many bytes of the relay's data: the sender may send that many more. */
const RelayCredit = z.object({ type: z.literal('relay-credit'), relayId: RelayId, bytes: z.int().min(1).max(LINK_LIMITS.relayChunkBytes * 64) });
/**
 * The relay is over: a WebSocket closed (`code`, `reason`, as RFC 6455 gives them), an HTTP exchange cut off, or —
 * with `error` — one that failed (the agent: the model is not passed through here, ComfyUI could not be reached).
 */
const RelayClose = z.object({
  type: z.literal('relay-close'),
  relayId: RelayId,
  code: z.int().min(1000).max(4999).optional(),
  reason: z.string().max(123).optional(),
  error: ErrorBody.optional(),
});

export const AgentMessage = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('hello'),
    protocol: z.number(),
    host: z.string().min(1).max(100),
    classes: list(Id),
    devices: list(Device),
    engines: list(Id),
    /** Model digests already in the agent's local cache. */
    models: list(Id),
    /** Jobs this agent holds: still running, or finished with a result not yet acknowledged. */
    inFlight: z.array(z.object({ jobId: Id, batchId: Id })).max(LINK_LIMITS.heldJobs),
    /** Batches the agent runs at once. */
    concurrency: z.number().int().min(1).max(LINK_LIMITS.concurrency),
    version: z.string().max(LINK_LIMITS.idChars),
    /** Models still loaded from before a reconnect, so the orchestrator counts them as replicas at once. */
    resident: list(ResidentModel).optional(),
    /** The agent is draining (it reconnected mid-drain): send it nothing new. */
    draining: z.boolean().optional(),
    /**
     * Classes it was configured to serve and cannot, with why (left out of `classes`): so the mesh can say why a clip
     * waits rather than "class not granted". Optional: an older orchestrator ignores it (no version change).
     */
    unavailable: list(UnavailableClass).optional(),
    /** The programs it found for its work (ffmpeg), for `gpumesh status`. Optional, like `unavailable`. */
    tools: list(ToolReport).optional(),
    /** Who its engine processes run as, in words (`nobody`; `root: nobody cannot read …`), for `gpumesh status`. Optional. */
    engineUser: z.string().max(500).optional(),
    /** Its platform (`linux`, `windows`, `macos`, …) and how it governs its engines (`cgroup v2`, `job objects`, `portable`, …). Optional. */
    platform: z.string().max(40).optional(),
    governance: z.string().max(40).optional(),
    /**
     * The models its host's own config declares (their commands, servers, …: HostConfig): a model whose engine runs
     * only where it is declared is routed only to hosts that list it. Optional: an older agent says nothing.
     */
    configured: list(Id).optional(),
    /** It takes no work now (its owner, its hours, its heat). Optional: absent means it takes work. */
    away: HostAway.optional(),
    /**
     * Its network interfaces' MAC addresses (`aa:bb:cc:dd:ee:ff`), where its owner opts in (host config `wake.announce`),
     * so the orchestrator can wake it with a Wake-on-LAN packet while it sleeps. Optional.
     */
    macs: z.array(z.string().regex(/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/)).max(16).optional(),
    /**
     * The models whose ComfyUI its owner lets clients with a grant use directly (host config `passthrough: true`):
     * the orchestrator relays to no other, and opens relays only with agents that name some. Optional.
     */
    passthrough: list(Id).optional(),
  }),
  z.object({
    type: z.literal('heartbeat'),
    resident: list(ResidentModel),
    devices: list(Device),
    /**
     * Whether it takes work: away and why, or null when it does (sent out of turn when that changes). Optional: an
     * agent that says nothing of it takes work (an older one, or one with no policy).
     */
    away: HostAway.nullable().optional(),
  }),
  /**
   * A batch waits while its model is made resident (a pull, a server started, a session built): the jobs' `loading`
   * phase. Sent only when the model was not resident; `started` follows with `loadMs`, or `failed` if the load failed.
   */
  z.object({ type: z.literal('loading'), batchId: Id, jobIds: JobIds }),
  z.object({
    type: z.literal('started'), batchId: Id, jobIds: JobIds,
    /** How long the batch waited for its model to load (after a `loading`); absent or 0 when it was resident. */
    loadMs: z.number().min(0).optional(),
    /** Where `loadMs` went (after a `loading`; see LoadPhases). */
    phases: LoadPhases.optional(),
  }),
  z.object({ type: z.literal('progress'), batchId: Id, jobIds: JobIds, step: z.number(), total: z.number() }),
  /**
   * The engine is done with a batch and its outputs are on their way (uploads, or inline results the orchestrator
   * still has to check and store): its slot may take the next batch, whose inputs then arrive while these outputs
   * travel. Sent only to an orchestrator whose welcome said `freesSlotOnComputed`, and only for a batch with files
   * to deliver; without it the slot is freed by the batch's last result.
   */
  z.object({ type: z.literal('computed'), batchId: Id }),
  /** A picture of one job's work so far (its input asked for previews): PNG, base64. */
  z.object({ type: z.literal('preview'), batchId: Id, jobId: Id, step: z.number(), total: z.number(), png: z.string().max(LINK_LIMITS.previewChars) }),
  z.object({
    type: z.literal('done'),
    jobId: Id,
    batchId: Id,
    artifacts: z.array(ArtifactReport).max(LINK_LIMITS.artifactsPerResult),
    result: z.unknown().optional(),
    timings: Timings,
    memory: BatchMemoryReport.optional(),
    /**
     * The energy the job took (J): its share of its batch's, from its GPU's power as the driver reported it over the
     * batch's run. Absent where the device reports no power (a CPU): never made up. Optional (no version change).
     */
    energyJ: z.number().min(0).max(1e9).optional(),
  }),
  z.object({
    type: z.literal('failed'),
    jobId: Id,
    batchId: Id,
    error: ErrorBody,
    /** False when the input is at fault, so another replica would fail the same way. */
    retryable: z.boolean(),
  }),
  z.object({ type: z.literal('loaded'), model: Id, digest: Id, device: Id, memoryMB: z.number() }),
  z.object({ type: z.literal('unloaded'), model: Id, digest: Id, device: Id }),
  /** The agent did not load a model `load` asked for: too large for every budget, no room, no engine, a failed pull. */
  z.object({ type: z.literal('load-refused'), model: Id, error: ErrorBody }),
  /** The agent is leaving (SIGTERM, `gpumesh agent drain`, or a `drain` it was sent): it finishes what it holds and takes nothing new. */
  z.object({ type: z.literal('draining') }),
  /** A relay's answer: an HTTP answer's status and headers (its body follows in `relay-data`), or 101 once its WebSocket is open. */
  z.object({ type: z.literal('relay-head'), relayId: RelayId, status: z.int().min(100).max(599), headers: RelayHeaders }),
  RelayData,
  RelayCredit,
  RelayClose,
  /**
   * A model its owner lets run clients' whole workflows (ComfyUI's `acceptWorkflows`), and what its server offers
   * them: `/object_info`, trimmed (protocol/workflows.ts), or null while that is not known (the server is not up, or
   * did not answer). Sent after the welcome for each such model its host declares, and again whenever the model loads.
   * Only to an orchestrator whose welcome said `takesCatalogues` (an older one would refuse the message).
   */
  z.object({ type: z.literal('catalogue'), model: Id, nodes: NodeCatalogue.nullable() }),
]);
export type AgentMessage = z.infer<typeof AgentMessage>;

export const RunJob = z.object({
  id: z.string(),
  input: z.record(z.string(), z.unknown()),
  deadlineAt: z.number().nullable(),
});
export type RunJob = z.infer<typeof RunJob>;

export const OrchestratorMessage = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('welcome'), session: z.string(), heartbeatMs: z.number(), protocol: z.number(),
    /** Outputs up to this many bytes (per report, all files together) travel inline in `done`; larger ones are uploaded. */
    inlineOutputBytes: z.number().int().min(0),
    /**
     * How long the orchestrator lets a link stay silent before it drops it (agents.staleAfterMs). The agent holds
     * the orchestrator to the same: a link that answers neither messages nor pings for this long is dropped and
     * redialled. Optional (an older orchestrator does not send it): the agent then takes 3 heartbeats.
     */
    staleAfterMs: z.number().int().positive().optional(),
    /** It frees a batch's slot on the agent's `computed` report. Optional: an older orchestrator neither says it nor takes the report. */
    freesSlotOnComputed: z.boolean().optional(),
    /** It takes `catalogue` reports (models that run clients' workflows). Optional: an older orchestrator does not. */
    takesCatalogues: z.boolean().optional(),
  }),
  z.object({
    type: z.literal('run'), batchId: z.string(), model: ModelManifest, jobs: z.array(RunJob),
    /** Lets the agent upload the outputs of this batch's jobs, and nothing else. */
    uploadCredential: z.string(),
    /**
     * A health probe: one job with the model pipeline's probe input, run through the normal path. The agent
     * reports `done` without delivering outputs (nothing is uploaded or inlined); an agent that ignores the
     * flag still answers correctly, since a probe's tiny output travels inline and the orchestrator drops it.
     */
    probe: z.boolean().optional(),
  }),
  z.object({ type: z.literal('cancel'), jobId: z.string() }),
  /** Results the orchestrator has recorded; the agent stops re-sending them. */
  z.object({ type: z.literal('ack'), jobIds: z.array(z.string()) }),
  /**
   * Make a model resident now (a replica the autoscaler placed here). `hold`: the mesh's minReplicas rely on it,
   * so the agent keeps it until `unload` (its idle unload and eviction leave it alone); without it the model is
   * an ordinary resident one. Answered with `loaded` or `load-refused`.
   */
  z.object({ type: z.literal('load'), model: ModelManifest, hold: z.boolean() }),
  /** Unload a model once no batch uses it (the autoscaler scaled it in here). Answered with `unloaded`. */
  z.object({ type: z.literal('unload'), model: z.string() }),
  /** Finish the work in flight, take no more, and leave once every result is acknowledged (an admin drained this host). */
  z.object({ type: z.literal('drain') }),
  /**
   * Relay a client's request to the ComfyUI of `model` (which must be passed through on this host), loading the model
   * first if it is not resident (a server the agent starts is started). `chunkBytes`: the most one `relay-data` may
   * carry (the orchestrator's frame limit decides); `windowBytes`: what either side may send ahead of credit.
   */
  z.object({
    type: z.literal('relay-open'), relayId: RelayId, model: ModelManifest, request: RelayRequest,
    chunkBytes: z.int().min(1024).max(LINK_LIMITS.relayChunkBytes),
    windowBytes: z.int().min(1024).max(LINK_LIMITS.relayChunkBytes * 64),
  }),
  RelayData,
  RelayCredit,
  RelayClose,
]);
export type OrchestratorMessage = z.infer<typeof OrchestratorMessage>;

/** WebSocket close codes the orchestrator uses to tell an agent why it was dropped. */
export const LINK_CLOSE = {
  /** The grant or hello was refused: reconnecting will not help. */
  rejected: 4403,
  /** Another connection took over this host id. */
  replaced: 4409,
  /** Heartbeats stopped. */
  stale: 4408,
  /** No hello arrived in time after the upgrade. */
  noHello: 4400,
  shuttingDown: 1001,
  /** A frame that is not a JSON message of this protocol (RFC 6455 1008, policy violation). */
  malformed: 1008,
  /**
   * The link kept sending more messages than its budget (`agents.link.messagesPerSecond`, `burst`) for
   * `agents.link.overBudgetCloseMs`. The agent redials after its backoff, as after any drop.
   */
  overBudget: 4429,
  /** A binary frame: the protocol is JSON text (RFC 6455 1003, unsupported data). */
  binary: 1003,
} as const;
