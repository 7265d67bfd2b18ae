import { z } from 'zod';
import { Readiness, ServerSettings as GovernedServer } from '../../governance/settings.js';

/** What a server engine's model says about a server the agent starts for it (the command-template fields). */
const { command, readiness: _readiness, restart: _restart, ...governed } = GovernedServer.shape;

/**
 * The settings of a model whose server the agent starts itself, spread into
 * each server engine's settings schema beside its own fields: the command
 * template (`sd-server --model ${MODEL_PATH} --port ${PORT}`), the readiness
 * check (default: the engine's own), the idle window after which the model is
 * unloaded and its server stopped (`idleStopMs`), the stop grace, extra
 * environment, and the server's cgroup limits. They are governance's
 * `ServerSettings` (agent/governance/settings.ts), so their defaults and
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
