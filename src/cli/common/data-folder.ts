import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

/**
 * Where a mesh keeps its data when nothing says: each platform's folder for an application's own data —
 * `%LOCALAPPDATA%\gpumesh` on Windows (local, not roaming: a model cache has no place in a roaming profile),
 * `~/Library/Application Support/gpumesh` on macOS, `$XDG_DATA_HOME/gpumesh` (else `~/.local/share/gpumesh`)
 * elsewhere, as the XDG base directory specification says (a relative XDG_DATA_HOME is ignored, as it says too).
 */
export function platformDataDir(platform: NodeJS.Platform = process.platform, env: NodeJS.ProcessEnv = process.env, home = homedir()): string {
  if (platform === 'win32') return path.win32.join(env.LOCALAPPDATA ?? path.win32.join(home, 'AppData', 'Local'), 'gpumesh');
  if (platform === 'darwin') return path.posix.join(home, 'Library', 'Application Support', 'gpumesh');
  const xdg = env.XDG_DATA_HOME;
  return path.posix.join(xdg && path.posix.isAbsolute(xdg) ? xdg : path.posix.join(home, '.local', 'share'), 'gpumesh');
}

/** The folder a mesh used before platform folders, in the folder it was started from: it keeps working where it exists. */
export const LEGACY_DATA_DIR = '.gpumesh';

/** Where the mesh keeps its data: --data, then $GPUMESH_HOME, then ./.gpumesh where it exists, then the platform's folder. */
export function dataDir(option?: string): string {
  if (option) return path.resolve(option);
  if (process.env.GPUMESH_HOME) return path.resolve(process.env.GPUMESH_HOME);
  if (existsSync(LEGACY_DATA_DIR)) return path.resolve(LEGACY_DATA_DIR);
  return platformDataDir();
}

/** The default data folder as --help describes it, with this machine's platform folder written out. */
export const dataDirHelp = (): string => `env GPUMESH_HOME; default ./${LEGACY_DATA_DIR} where it exists, else ${platformDataDir()}`;
