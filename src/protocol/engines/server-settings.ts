import { z } from 'zod';
import { Readiness, ServerSettings as GovernedServer } from './process-settings.js';

const ms = (fallback: number) => z.int().min(1).default(fallback);

/** Waits that start at `initialMs` and grow by `factor` up to `maxMs`. */
export const BackoffSettings = (initialMs: number, maxMs: number, factor: number) => z.object({
  initialMs: ms(initialMs),
  maxMs: ms(maxMs),
  factor: z.number().min(1).max(10).default(factor),
}).prefault({});

/**
 * Settings the HTTP image engines (sdcpp, openai-images) understand in a model manifest's `settings`, beside the
 * launch settings of a server the agent starts (`launchSettings` below).
 */
export const HttpEngineSettings = {
  /** A server the person already runs (`http://host:port`); without it the agent starts one from `command`. */
  url: z.url({ protocol: /^https?$/ }).optional(),
  /** Longest wait for one HTTP answer. A synchronous generation is one answer, so this is generous. Default 10 min. */
  requestTimeoutMs: ms(600_000),
  /** Longest a job may take once sent, when its own deadline is not sooner. Default 10 min. */
  jobTimeoutMs: ms(600_000),
  /** At load, how long to wait for the server to answer (it may still be loading its model). Default 2 min. */
  loadTimeoutMs: ms(120_000),
  /** Waits between retries while the server answers 429. Default 500 ms doubling to 5 s. */
  busyBackoff: BackoffSettings(500, 5000, 2),
};

/** What a server engine's model says about a server the agent starts for it (the command-template fields). */
const { command, readiness: _readiness, restart: _restart, ...governed } = GovernedServer.shape;

/**
 * The settings of a model whose server the agent starts itself, spread into
 * each server engine's settings schema beside its own fields: the command
 * template (`sd-server --model ${MODEL_PATH} --port ${PORT}`), the readiness
 * check (default: the engine's own), the idle window after which the model is
 * unloaded and its server stopped (`idleStopMs`), the stop grace, extra
 * environment, and the server's cgroup limits. They are governance's
 * `ServerSettings` (process-settings.ts), so their defaults and
 * meaning are documented once; `restart` is left out because a crashed
 * server's model is dropped and the agent's restart backoff paces the next
 * start (see docs/architecture.md, "Engine crashes").
 *
 * `readiness` is the engine's: each server answers a different route once it
 * has loaded its model.
 */
export function launchSettings(readiness: z.input<typeof Readiness>) {
  return {
    ...governed,
    /** The command that starts the server (see governance's ServerSettings). Absent: the model names a `url` instead. */
    command: command.optional(),
    readiness: Readiness.prefault(readiness),
  };
}

/** The launch fields of a server engine's settings, parsed (defaults filled). */
export interface LaunchSettings {
  command?: string;
  cwd?: string;
  readiness: z.output<typeof Readiness>;
  env: Record<string, string>;
  idleStopMs: number | null;
  stopGraceMs: number;
  memoryLimitMB: number | null;
  pidsLimit: number | null;
  cpuWeight: number;
  log: { lines: number; bytes: number };
}

/**
 * The settings of every server engine that only the host's own config may give (EngineDescriptor.hostSettingsOf): the
 * server it reaches (`url`), the server it starts (`command`), in which folder and with which environment.
 */
export const SERVER_HOST_SETTINGS = ['url', 'command', 'cwd', 'env'] as const;

/**
 * A server is either one the person runs (`url`) or one the agent starts (`command`), never both: a
 * refinement every server engine's schema carries, so mesh.yaml is refused at start when it says both.
 */
export function urlOrCommand(settings: { url?: string; command?: string }, context: z.RefinementCtx): void {
  if (settings.url !== undefined && settings.command !== undefined) {
    context.addIssue({
      code: 'custom', path: ['command'],
      message: 'give settings.url (a server you already run) or settings.command (a server the agent starts), not both',
    });
  }
}
