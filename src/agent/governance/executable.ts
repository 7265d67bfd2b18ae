import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
import { EngineError } from '../core/engine.js';

/**
 * The program a command names is not on this host (or not executable). Not retryable here, but another host may
 * have it: whoever starts a model's server on demand says so (ServerLauncher).
 */
export class MissingExecutable extends EngineError {
  constructor(message: string) {
    super('ENGINE_FAILED', message, false);
  }
}

/**
 * The file a command names, found the way execvp would find it, so that a
 * missing or non-executable program is a clear error before anything starts
 * (rather than an exit code 127 from the process that tried).
 */
export function resolveExecutable(command: string, env: NodeJS.ProcessEnv, cwd = process.cwd()): string {
  const candidates = command.includes('/')
    ? [isAbsolute(command) ? command : resolve(cwd, command)]
    : (env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(delimiter).filter(Boolean).map((dir) => join(resolve(cwd, dir), command));
  for (const candidate of candidates) {
    try {
      if (!statSync(candidate).isFile()) continue;
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here, or not executable: try the next
    }
  }
  const where = command.includes('/') ? 'no executable file there' : `not found on PATH (${env.PATH ?? ''})`;
  throw new MissingExecutable(`cannot start "${command}": ${where}`);
}
