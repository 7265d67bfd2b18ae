import { accessSync, constants, statSync } from 'node:fs';
import path from 'node:path';
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

/** How one platform finds a program: its path rules, its PATH's name and separator, and the extensions it tries. */
interface Lookup {
  path: path.PlatformPath;
  /** The extensions a bare name may stand for (Windows' PATHEXT), in order; [''] where a name is the file's. */
  extensions: (env: NodeJS.ProcessEnv) => string[];
  defaultPath: string;
}

const POSIX: Lookup = { path: path.posix, extensions: () => [''], defaultPath: '/usr/local/bin:/usr/bin:/bin' };
const WINDOWS: Lookup = {
  path: path.win32,
  // A name with an extension is tried as it is first (`node.exe`), then with each of PATHEXT's (`gpumesh` → `gpumesh.CMD`).
  extensions: (env) => ['', ...(variable(env, 'PATHEXT') ?? '.COM;.EXE;.BAT;.CMD').split(';').filter(Boolean)],
  defaultPath: 'C:\\Windows\\System32;C:\\Windows',
};

/** An environment variable by name, as Windows reads it (any case), from a plain object (which is not case-blind). */
function variable(env: NodeJS.ProcessEnv, name: string): string | undefined {
  if (env[name] !== undefined) return env[name];
  const key = Object.keys(env).find((candidate) => candidate.toUpperCase() === name);
  return key === undefined ? undefined : env[key];
}

/**
 * The file a command names, found the way the system would find it — execvp's rules on POSIX; on Windows, drive
 * letters and backslashes, PATH in any case, and the extensions PATHEXT lists —, so that a missing or non-executable
 * program is a clear error before anything starts (rather than an exit code 127 from the process that tried).
 * `platform`: whose rules (tests); default this host's.
 */
export function resolveExecutable(command: string, env: NodeJS.ProcessEnv, cwd = process.cwd(), platform = process.platform): string {
  const lookup = platform === 'win32' ? WINDOWS : POSIX;
  const { path: paths } = lookup;
  const named = command.includes('/') || (platform === 'win32' && (command.includes('\\') || paths.isAbsolute(command)));
  const searchPath = variable(env, 'PATH') ?? lookup.defaultPath;
  const bases = named
    ? [paths.isAbsolute(command) ? command : paths.resolve(cwd, command)]
    : searchPath.split(paths.delimiter).filter(Boolean).map((dir) => paths.join(paths.resolve(cwd, dir), command));
  for (const base of bases) {
    for (const extension of lookup.extensions(env)) {
      const candidate = base + extension;
      try {
        if (!statSync(candidate).isFile()) continue;
        accessSync(candidate, constants.X_OK);
        return candidate;
      } catch {
        // not here, or not executable: try the next
      }
    }
  }
  const where = named ? 'no executable file there' : `not found on PATH (${searchPath})`;
  throw new MissingExecutable(`cannot start "${command}": ${where}`);
}

/**
 * Where NVIDIA's drivers install nvidia-smi on Windows, after PATH (which their installers do not always extend):
 * System32 for current (DCH) drivers, `NVIDIA Corporation\NVSMI` under Program Files for older ones.
 */
export function nvidiaSmiCandidates(env: NodeJS.ProcessEnv, platform = process.platform): string[] {
  if (platform !== 'win32') return ['nvidia-smi'];
  const systemRoot = variable(env, 'SYSTEMROOT') ?? 'C:\\Windows';
  const programFiles = variable(env, 'PROGRAMFILES') ?? 'C:\\Program Files';
  return [
    'nvidia-smi',
    path.win32.join(systemRoot, 'System32', 'nvidia-smi.exe'),
    path.win32.join(programFiles, 'NVIDIA Corporation', 'NVSMI', 'nvidia-smi.exe'),
  ];
}

/** The nvidia-smi of this host (the first of nvidiaSmiCandidates there is), else the bare name (which then fails: no GPU). */
export function findNvidiaSmi(env: NodeJS.ProcessEnv = process.env, platform = process.platform): string {
  for (const candidate of nvidiaSmiCandidates(env, platform)) {
    try {
      return resolveExecutable(candidate, env, process.cwd(), platform);
    } catch {
      // not there: the next
    }
  }
  return 'nvidia-smi';
}
