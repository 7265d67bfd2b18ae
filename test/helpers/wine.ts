import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './mesh.js';

/**
 * A Windows host on this Linux machine, for the tests: Debian's Wine, node.exe from npm, and this checkout's build
 * beside its dependencies as Windows installs them (scripts/wine-env.sh makes it once, in .wine/). What Wine does not
 * do as Windows does is handled here, in the harness, never in the product (../shared/WINDOWS.md): node.exe's stdio
 * goes to files (a Unix pipe crashes it), and the prefix holds a stand-in bcryptprimitives.dll for libvips.
 */
export interface WineHost {
  prefix: string;
  nodeExe: string;
  /** The folder node.exe runs gpumesh from: the build (dist/, bin/) beside the win32 node_modules. */
  app: string;
  env: NodeJS.ProcessEnv;
}

/** Whether this machine has Wine at all. */
export const hasWine = (): boolean => spawnSync('sh', ['-c', 'command -v wine'], { stdio: 'ignore' }).status === 0;

/** Make (or reuse) the Windows host and put this checkout's build in it. */
export function prepareWine(): WineHost {
  const made = spawnSync('bash', [join(ROOT, 'scripts/wine-env.sh')], { encoding: 'utf8', timeout: 600_000 });
  if (made.status !== 0) throw new Error(`scripts/wine-env.sh failed (${made.status}):\n${made.stderr}`);
  const vars = Object.fromEntries(made.stdout.trim().split('\n').filter((line) => line.includes('=')).map((line) => line.split(/=(.*)/s).slice(0, 2)));
  const app = vars.WINE_APP!;
  for (const part of ['dist', 'bin']) {
    rmSync(join(app, part), { recursive: true, force: true });
    cpSync(join(ROOT, part), join(app, part), { recursive: true });
  }
  cpSync(join(ROOT, 'package.json'), join(app, 'package.json'));
  const env: NodeJS.ProcessEnv = { ...process.env, WINEPREFIX: vars.WINEPREFIX, WINEDEBUG: '-all' };
  delete env.DISPLAY;
  return { prefix: vars.WINEPREFIX!, nodeExe: vars.NODE_EXE!, app, env };
}

/** A Linux path as a Windows process under Wine sees it (Z: is the root). */
export const windowsPath = (path: string): string => `Z:${path.replaceAll('/', '\\')}`;

export interface WineProcess {
  child: ChildProcess;
  /** What it wrote so far (stdout and stderr, from their files). */
  output(): string;
  exited(): Promise<number | null>;
}

/** Run node.exe under Wine with these arguments in `cwd` (default: the app folder), its output to files in `logDir`. */
export function runWindowsNode(wine: WineHost, args: string[], logDir: string, name: string, cwd = wine.app): WineProcess {
  const out = join(logDir, `${name}.out`);
  const err = join(logDir, `${name}.err`);
  const child = spawn('wine', [wine.nodeExe, ...args], { cwd, env: wine.env, stdio: ['ignore', openSync(out, 'w'), openSync(err, 'w')] });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    output: () => [out, err].map((file) => (existsSync(file) ? readFileSync(file, 'utf8') : '')).join(''),
    exited: () => exit,
  };
}

/** Linux pids of the processes whose command line holds every marker (Wine's processes are Linux's too). */
export function processesWith(...markers: string[]): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      const state = readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]?.[0];
      if (markers.every((marker) => cmdline.includes(marker)) && state !== 'Z') pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}
