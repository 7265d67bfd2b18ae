import { z } from 'zod';

/**
 * Governance settings: the limits and behaviour of the engine processes an
 * agent runs. Each schema fills its documented defaults when parsed, so the
 * input type (`…Input`, what a config file or manifest may say) and the
 * resolved type (what the code reads) differ. Engine adapters validate a model
 * manifest's `settings` with `ServerSettings` or `CommandSettings`.
 */

const isRegex = (source: string): boolean => {
  try {
    new RegExp(source);
    return true;
  } catch {
    return false;
  }
};

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Limits applied through the process's cgroup (ignored, with one log line at start, where cgroups are not available). */
export const ProcessLimits = z.object({
  /** Memory the process tree may use, in MB (v2 `memory.max`, v1 `memory.limit_in_bytes`); swap is denied where the host allows. Default: null (no limit beyond the host's). */
  memoryLimitMB: z.number().int().positive().nullable().default(null),
  /** Tasks — processes *and threads* — the tree may hold (`pids.max`). Default 4096: Python servers with a CUDA runtime start hundreds of threads. null: no limit. */
  pidsLimit: z.number().int().positive().nullable().default(4096),
  /** CPU weight against other engines, 1–10000 (v2 `cpu.weight`; v1 `cpu.shares` = weight × 1024 / 100). Default 100 (the kernel's default). */
  cpuWeight: z.number().int().min(1).max(10_000).default(100),
});
export type ProcessLimits = z.output<typeof ProcessLimits>;
export type ProcessLimitsInput = z.input<typeof ProcessLimits>;

/** When a server counts as ready: an HTTP route answers 2xx, or a line of its output matches a regular expression. */
export const Readiness = z.union([
  z.object({
    /** A path polled with GET on the server's URL until it answers 2xx. */
    http: z.string().regex(/^\//, 'must be a path starting with /'),
    /** Give up (and stop the server) after this long. Default 120 s: large models load slowly. */
    timeoutMs: z.number().int().positive().default(120_000),
    /** The longest pause between polls: they start 5 ms apart and double up to this. Default 200 ms. */
    intervalMs: z.number().int().positive().default(200),
  }).strict(),
  z.object({
    /** A regular expression tested against each line of stdout and stderr. */
    logLine: z.string().min(1).refine(isRegex, 'not a valid regular expression'),
    timeoutMs: z.number().int().positive().default(120_000),
  }).strict(),
]);
export type Readiness = z.output<typeof Readiness>;

/** How much of a process's output the agent keeps (for error messages); the rest is read and dropped. */
export const LogLimits = z.object({
  /** Last lines kept. Default 200. */
  lines: z.number().int().positive().default(200),
  /** Bytes those lines may take together. Default 64 KiB. */
  bytes: z.number().int().positive().default(64 * 1024),
});
export type LogLimits = z.output<typeof LogLimits>;

/** Restarting a server that exits on its own. */
export const RestartPolicy = z.object({
  /** Delay before the first restart. Default 1 s. */
  initialDelayMs: z.number().int().nonnegative().default(1000),
  /** Each further consecutive failure multiplies the delay by this. Default 2. */
  factor: z.number().min(1).default(2),
  /** The delay never exceeds this. Default 60 s. */
  maxDelayMs: z.number().int().nonnegative().default(60_000),
  /** A run that lasted this long resets the count of consecutive failures. Default 60 s. */
  stableAfterMs: z.number().int().positive().default(60_000),
  /** Stop restarting after this many failures in a row (the next request for the server tries again). Default 5. */
  maxConsecutiveFailures: z.number().int().positive().default(5),
});
export type RestartPolicy = z.output<typeof RestartPolicy>;

const Env = z.record(z.string().regex(ENV_NAME, 'not an environment variable name'), z.string());

/** An engine that is a server the agent runs (sd-server, ComfyUI, …). */
export const ServerSettings = ProcessLimits.extend({
  /**
   * The command, split like a shell would split it (quotes, backslashes) but never run by a shell.
   * `${PORT}`, `${HOST}`, `${MODEL_PATH}`, `${GPU}`, `${DATA_DIR}` and the names in `env` are expanded
   * inside their argument, never split: `sd-server --model ${MODEL_PATH} --port ${PORT}`.
   */
  command: z.string().min(1),
  /**
   * Its working folder (a server that finds its files relative to it, such as `python main.py` in ComfyUI's folder).
   * Default: an empty folder of its own, removed when it ends. Only the host's own config may set it.
   */
  cwd: z.string().min(1).optional(),
  /** Default: GET / answers 2xx within 120 s. */
  readiness: Readiness.prefault({ http: '/' }),
  /** Extra environment (values may use the same `${…}` variables). Variables named GPUMESH_* are never passed on. Default: none. */
  env: Env.default({}),
  /** Stop the server after this long without work (the adapter holds it while busy). Default: null (the model's residency decides). */
  idleStopMs: z.number().int().positive().nullable().default(null),
  /** Between SIGTERM and SIGKILL. Default 10 s (servers free GPU memory on SIGTERM). */
  stopGraceMs: z.number().int().nonnegative().default(10_000),
  restart: RestartPolicy.prefault({}),
  log: LogLimits.prefault({}),
});
export type ServerSettings = z.output<typeof ServerSettings>;
export type ServerSettingsInput = z.input<typeof ServerSettings>;

/** A one-shot command run per batch (ffmpeg, a user script). */
export const CommandSettings = ProcessLimits.extend({
  /** Split and expanded as for servers; the caller names its own variables (`${INPUT}`, `${OUTPUT}`, …). */
  command: z.string().min(1),
  env: Env.default({}),
  /** Kill the command after this long. Default 10 min. */
  timeoutMs: z.number().int().positive().default(600_000),
  /** Between SIGTERM and SIGKILL on timeout or cancel. Default 2 s. */
  stopGraceMs: z.number().int().nonnegative().default(2000),
  /** Stdout kept for the caller; beyond it, read and dropped (the result says so). Default 1 MiB. */
  maxStdoutBytes: z.number().int().nonnegative().default(1024 * 1024),
  log: LogLimits.prefault({}),
});
export type CommandSettings = z.output<typeof CommandSettings>;
export type CommandSettingsInput = z.input<typeof CommandSettings>;

/**
 * The host's ceilings for one engine's processes (its servers), set by whoever runs the agent
 * (`--engine-limit sdcpp.memoryLimitMB=12000`). A model's own limits (its settings) apply up to them.
 */
export const EngineLimits = z.strictObject({
  memoryLimitMB: z.number().int().positive().optional(),
  pidsLimit: z.number().int().positive().optional(),
  cpuWeight: z.number().int().min(1).max(10_000).optional(),
});
export type EngineLimits = z.output<typeof EngineLimits>;

/** The agent's governance: which cgroup version to use, the built-in engine's limits, and ceilings per engine. */
export const GovernanceConfig = z.object({
  /**
   * How engine processes are governed: `auto`, the platform's own way — cgroups and process groups on Linux, Job
   * Objects on Windows, `portable` elsewhere —; `portable`, process groups with a lifeline (a tree dies with its agent
   * through a pipe) and memory read by polling, on any platform (`--governance portable`). Default auto.
   */
  mode: z.enum(['auto', 'portable']).default('auto'),
  /** `auto` prefers cgroup v2 (with the memory controller), then v1; `off` uses process groups only. Default auto. */
  cgroups: z.enum(['auto', 'v2', 'v1', 'off']).default('auto'),
  /**
   * cgroup v2 only: a cgroup directory delegated to the agent, under which it creates `gpumesh/`.
   * Default: the agent's own cgroup (read from /proc/self/cgroup).
   */
  cgroupRoot: z.string().startsWith('/').nullable().default(null),
  /** Limits for the ONNX worker processes (one per device). */
  onnx: ProcessLimits.prefault({}),
  /** Ceilings for the servers of each engine, by engine name (`sdcpp`, `comfyui`, …). Default: none. */
  engines: z.record(z.string(), EngineLimits).default({}),
});
export type GovernanceConfig = z.output<typeof GovernanceConfig>;
export type GovernanceConfigInput = z.input<typeof GovernanceConfig>;
