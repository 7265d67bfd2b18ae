import { z } from 'zod';

/**
 * The error registry: every error the mesh can return is declared here once,
 * with its code, HTTP status and message template. `docs/errors.md` documents
 * each code and a test keeps the two in step.
 */
export const ERRORS = {
  // Requests
  BAD_REQUEST: { status: 400, message: 'The request is malformed: {detail}' },
  VALIDATION_FAILED: { status: 400, message: 'The request body is invalid: {detail}' },
  INVALID_PATH_PARAMETER: { status: 400, message: 'The path parameter {name} is invalid: {detail}' },
  INVALID_QUERY_PARAMETER: { status: 400, message: 'The query parameter {name} is invalid: {detail}' },
  REQUEST_TIMEOUT: { status: 408, message: 'The request did not arrive in time' },
  PRECONDITION_FAILED: { status: 412, message: 'A precondition (If-Match, If-Unmodified-Since) does not hold' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'The request body is larger than the limit of {limit} bytes' },
  URI_TOO_LONG: { status: 414, message: 'A path segment of the URL is longer than the limit of {limit} characters' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'Unsupported content type: {detail}' },
  NESTING_TOO_DEEP: { status: 400, message: 'The {where} nests arrays and objects deeper than the limit of {limit} levels' },
  RANGE_NOT_SATISFIABLE: { status: 416, message: 'The range "{range}" is outside the blob\'s {size} bytes' },
  UPGRADE_REQUIRED: { status: 426, message: 'This route is a WebSocket: connect with "Upgrade: websocket"' },
  HEADERS_TOO_LARGE: { status: 431, message: 'The request line and headers are larger than the limit of {limit} bytes' },
  NOT_FOUND: { status: 404, message: '{what} was not found' },
  ROUTE_NOT_FOUND: { status: 404, message: 'No route {method} {url}' },

  // Grants
  GRANT_MISSING: { status: 401, message: 'This route needs a grant: send "Authorization: Bearer <grant>"' },
  GRANT_INVALID: { status: 401, message: 'The grant is not valid: {detail}' },
  GRANT_EXPIRED: { status: 401, message: 'The grant expired at {expires}' },
  GRANT_REVOKED: { status: 401, message: 'The grant was revoked' },
  GRANT_DENIED: { status: 403, message: 'The grant does not allow this: caveat "{caveat}" failed ({detail})' },
  GRANT_IN_QUERY: { status: 400, message: 'A grant in the URL (access_token) is accepted only by blob reads and event streams, not by {route}; send it as "Authorization: Bearer <grant>"' },

  // Jobs
  UNKNOWN_JOB_TYPE: { status: 400, message: 'Unknown job type "{type}"; this mesh serves: {known}' },
  UNKNOWN_MODEL: { status: 400, message: 'Unknown model "{model}"; this mesh has: {known}' },
  MODEL_TYPE_MISMATCH: { status: 400, message: 'Model "{model}" does not serve job type "{type}"' },
  INVALID_INPUT: { status: 400, message: 'Invalid input for model "{model}": {detail}' },
  MODEL_EXISTS: { status: 409, message: 'Model {model} exists: {detail}' },
  MODEL_IN_USE: { status: 409, message: 'Model {model} has {jobs} jobs queued or running: cancel them or wait until they end, then remove it' },
  MODEL_PINNED: { status: 409, message: 'Model {model} is pinned to version {version} in mesh.yaml (models.{model}.version): {detail}' },
  HOST_CONFIG_ONLY: {
    status: 403,
    message: 'Model {model}: {keys} can come only from the config of the host that runs it, never over the API: {detail}',
  },
  JOB_NOT_CANCELLABLE: { status: 409, message: 'Job {id} is already {status} and cannot be cancelled' },
  IDEMPOTENCY_MISMATCH: { status: 422, message: 'The idempotency key "{key}" was already used for a different request in the last 24 h; use a new key for a new request' },
  QUEUE_FULL: { status: 429, message: 'The queue of model "{model}" is full ({depth} of {limit} jobs); retry after {retryAfter}s' },
  MESH_FULL: { status: 429, message: 'The mesh holds its limit of {limit} queued jobs; retry after {retryAfter}s' },
  RATE_LIMITED: { status: 429, message: 'The grant allows {rate}; retry after {retryAfter}s' },
  QUEUED_CAP_REACHED: {
    status: 429,
    message: 'The grant allows {limit} jobs of its lineage queued at once (caveat "{caveat}"): {queued} are queued, so {left} more fit and this request asks for {asked}; retry after {retryAfter}s, as they leave the queue',
  },
  DEVICE_TIME_CAP_REACHED: {
    status: 429,
    message: 'The grant allows {limit} device-seconds per UTC day (caveat "{caveat}"): its lineage used {used} today, {left} left; it refills at {refillsAt}, in {retryAfter}s',
  },
  WEBHOOK_NOT_ALLOWED: { status: 403, message: 'The callback URL {url} is refused by {rule}: {detail}' },
  BAD_REFERENCE: { status: 400, message: 'The reference {field} cannot be used: {detail}' },
  SOURCE_FAILED: {
    status: 422,
    message: 'Source job {source} ended {status}{cause}: the job that takes its output ({field}) cannot run',
  },
  PIPELINE_INVALID: { status: 400, message: 'The pipeline is invalid at {field}: {detail}' },
  PRIORITY_DENIED: { status: 403, message: 'The grant allows priority {ceiling} at the highest, not {priority}' },
  TIMEOUT_TOO_LONG: { status: 400, message: 'timeoutMs {timeoutMs} exceeds the limit of {limit} ms for model "{model}"' },
  JOB_TOO_LARGE: {
    status: 422,
    message: 'The job needs an estimated {needMB} MB on model "{model}" ({detail}), more than the largest device budget among hosts that can run it: {budgetMB} MB on {host}',
  },
  CLASS_UNAVAILABLE: {
    status: 422,
    message: 'No host can run a {type} job: no host, connected or expected back, serves {classes}, and {detail}. Fix that host, or join one that serves {classes}, then submit again',
  },
  WORKFLOW_UNSUPPORTED: {
    status: 400,
    message: 'No host can run this workflow on model "{model}": {detail}',
  },

  // Blobs and uploads
  DIGEST_MISMATCH: { status: 400, message: 'The uploaded bytes hash to {actual}, not {expected}' },
  BAD_DIGEST: { status: 400, message: 'Not a digest: "{digest}" (expected sha256:<64 hex>)' },
  IMAGE_REFUSED: { status: 400, message: 'Not a picture gpumesh will decode: {detail}' },
  UPLOAD_CONFLICT: { status: 409, message: 'Upload {id} has {offset} bytes ({detail}): send the next chunk from offset {offset}' },
  TOO_MANY_UPLOADS: {
    status: 429,
    message: 'This grant lineage has {open} resumable uploads open, its limit (uploads.maxOpenPerGrant): complete or delete one (DELETE /v1/uploads/:id) before starting another; retry after {retryAfter}s',
  },
  STORAGE_FULL: { status: 507, message: 'The orchestrator\'s disk is full ({detail}): this request was not accepted; retry once space is freed' },
  BLOB_STORE_UNAVAILABLE: { status: 503, message: 'The blob store {store} could not be used ({detail}); nothing was published under a digest: retry after {retryAfter}s' },

  // The orchestrator's own package, for hosts that join with one line (GET /install/gpumesh.tgz)
  INSTALL_PACKAGE_UNAVAILABLE: { status: 503, message: 'This orchestrator cannot serve its own package: {detail}' },
  INSTALL_PACKAGE_CHANGED: {
    status: 410,
    message: 'This orchestrator serves gpumesh {version} as sha256:{current} now, not sha256:{asked}: it was rebuilt or upgraded since the join line was printed. Print a new one with `gpumesh grant create --agent`',
  },

  // The ComfyUI pass-through (/comfyui/<host>/<model>/…)
  PASSTHROUGH_NOT_FOUND: { status: 404, message: 'No ComfyUI pass-through at {host}/{model}: {detail}' },
  HOST_OFFLINE: { status: 503, message: 'Host {host} is not connected now ({detail}); retry after {retryAfter}s' },
  RELAY_UNAVAILABLE: { status: 503, message: 'The ComfyUI of {model} on {host} cannot take this now: {detail}; retry after {retryAfter}s' },
  RELAY_FAILED: { status: 502, message: 'The pass-through to the ComfyUI of {model} on {host} failed: {detail}' },

  // Agents and execution (carried in job errors and link messages)
  AGENT_OPTIONS_INVALID: { status: 400, message: 'The agent cannot start: {detail}' },
  AGENT_REJECTED: { status: 403, message: 'Agent {host} refused: {detail}' },
  NOT_READY: { status: 503, message: 'Not ready: {detail}' },
  ENGINE_FAILED: { status: 500, message: 'The engine failed: {detail}' },
  ENGINE_CRASHED: { status: 500, message: 'The engine process exited: {detail}' },
  ENGINE_UNREACHABLE: { status: 502, message: 'The engine server {url} could not be reached or dropped the connection: {detail}' },
  ENGINE_BUSY: { status: 503, message: 'The engine server {url} kept answering that its queue is full for {waitedMs} ms' },
  ENGINE_OOM: { status: 507, message: 'The engine process ran out of memory: {detail}' },
  MODEL_TOO_LARGE: { status: 507, message: 'Model "{model}" needs {needMB} MB, more than the largest budget ({budgetMB} MB)' },
  NO_ROOM: { status: 507, message: 'No device has room for model "{model}" while the models there are busy or held: {detail}' },
  INTEGRITY_FAILED: { status: 502, message: 'Blob {digest} failed its integrity check: {detail}' },
  AGENT_LOST: { status: 503, message: 'Host {host} went away while running the job' },
  HOST_AWAY: { status: 503, message: 'Host {host} takes no work now ({detail}): the job is handed back, for another host' },
  AGENT_TIMEOUT: { status: 504, message: 'Host {host} did not finish the batch within {budgetMs} ms ({basis})' },
  CANCELLED: { status: 409, message: 'The job was cancelled' },
  DEADLINE_EXCEEDED: { status: 504, message: 'The job passed its deadline' },
  DEADLINE_UNREACHABLE: { status: 422, message: 'No host that could run the job opens before its deadline ({deadline}): {detail}' },
  RETRIES_EXHAUSTED: { status: 502, message: 'The job failed {attempts} times: {detail}' },
  INTERNAL: { status: 500, message: 'Internal error: {detail}' },

  // Start-up and local files: they stop a command before it serves anything (never an HTTP answer of a route); the
  // message says what to do. The status is what a proxy in front would see were one ever passed on.
  STORE_UNAVAILABLE: { status: 503, message: 'The store ({store}) cannot be written now ({detail}); this request was not accepted: retry after {retryAfter}s' },
  NOT_LEADER: { status: 503, message: 'This orchestrator is a standby: the active one is {leader}. Send requests there, or retry here after {retryAfter}s' },
  STORE_TOO_NEW: { status: 500, message: 'The store is at schema version {found}, newer than this gpumesh knows ({known}): upgrade gpumesh, or point --data at another folder' },
  SECRET_FILE_INVALID: { status: 500, message: '{path} is not usable ({detail}); delete it to have a new one made' },
  TLS_MATERIAL_INVALID: { status: 500, message: 'The TLS material is not usable: {detail}' },
  TLS_CA_UNAVAILABLE: { status: 502, message: 'Cannot fetch the TLS CA from {url} ({detail}); check the URL and that the orchestrator runs with --tls' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERRORS;

/**
 * Client text quoted in an error (a field name, a path, a header, a key) is cut here, in the message and in MeshError's
 * `params` alike, whatever route quoted it: an answer never echoes a request back unbounded (a 200 KB multipart field
 * name once came back in a 164 KB answer). A run of more than QUOTE_LIMIT characters without a space (an identifier, a
 * token) keeps its first QUOTE_LIMIT and an ellipsis, and a whole parameter its first PARAM_LIMIT: the server's own
 * details (a list of models, every bad field) fit.
 */
export const QUOTE_LIMIT = 100;
const PARAM_LIMIT = 2000;
const LONG_RUN = new RegExp(`\\S{${QUOTE_LIMIT + 1},}`, 'g');

function bounded(value: unknown): string {
  const text = String(value);
  const whole = text.length > PARAM_LIMIT ? `${text.slice(0, PARAM_LIMIT)}…` : text;
  return whole.replace(LONG_RUN, (run) => `${run.slice(0, QUOTE_LIMIT)}…`);
}

/** Fill a message template, each parameter bounded (above); unknown placeholders are left visible so they are noticed. */
export function formatError(code: ErrorCode, params: Record<string, unknown> = {}): string {
  return ERRORS[code].message.replace(/\{(\w+)\}/g, (whole, key: string) =>
    key in params ? bounded(params[key]) : whole,
  );
}

/** An error that knows its code and HTTP status; the HTTP layer renders it as `{ error: { code, message, details? } }`. */
export class MeshError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly params: Record<string, unknown>;
  /** Extra HTTP headers (Retry-After on 429). */
  readonly headers: Record<string, string>;
  /** What a client acts on, besides the message, in the envelope's `details` (an upload's `offset` to resume from). */
  readonly details: Record<string, number | string> | undefined;

  constructor(code: ErrorCode, params: Record<string, unknown> = {}, options: { cause?: unknown; headers?: Record<string, string>; details?: Record<string, number | string> } = {}) {
    super(formatError(code, params), { cause: options.cause });
    this.name = 'MeshError';
    this.code = code;
    this.status = ERRORS[code].status;
    // Bounded as the message is: a surface that renders the error its own way (OpenAI's `param`) quotes these.
    this.params = Object.fromEntries(Object.entries(params).map(([key, value]) => [key, typeof value === 'string' ? bounded(value) : value]));
    this.headers = options.headers ?? {};
    this.details = options.details;
  }

  toJSON(): { code: ErrorCode; message: string; details?: Record<string, number | string> } {
    return { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}) };
  }
}

/**
 * A config file (mesh.yaml, host.yaml) that cannot be used, every problem named by its field: said as it is, without
 * a stack, by whatever reads the file.
 */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/** An error as an answer or an event carries it: its code (ERRORS) and its message. */
export const ErrorBody = z.strictObject({ code: z.string(), message: z.string() });
export type ErrorBody = z.infer<typeof ErrorBody>;

export function isErrorCode(value: string): value is ErrorCode {
  return Object.hasOwn(ERRORS, value);
}
