import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import type { ToolReport } from '../../protocol/index.js';
import { MissingExecutable, resolveExecutable } from '../governance/executable.js';

/** A tool found: its path, where it came from, and its version line. */
export type FoundTool = ToolReport;
/** A tool this host cannot use, and why (one sentence, shown in `gpumesh status`). */
export interface MissingTool {
  missing: string;
}

/** How one tool (ffmpeg, ffprobe) is looked for; every part may be replaced in a test. */
export interface ToolSearch {
  name: 'ffmpeg' | 'ffprobe';
  /**
   * The environment: `GPUMESH_FFMPEG` (or `GPUMESH_FFPROBE`) names the program to use, or `none`: this host has none
   * (video off; also how a test stands for a host without ffmpeg without uninstalling it). `PATH` is searched.
   */
  env: NodeJS.ProcessEnv;
  /** The binary shipped inside the npm package for this platform, or null where there is none. */
  packaged(): string | null;
  /** Why this program will not do (`ffmpeg` without libx264), or null when it will; and its version line. */
  check(path: string): Promise<{ version: string; unfit: string | null }>;
}

/** The env variable that overrides a tool: GPUMESH_FFMPEG, GPUMESH_FFPROBE. */
const overrideVariable = (name: string): string => `GPUMESH_${name.toUpperCase()}`;

/**
 * Find a tool: the one the override names, else the system's (on PATH) when it is fit, else the one shipped in
 * the npm package (`@ffmpeg-installer/ffmpeg`, `@ffprobe-installer/ffprobe`, installed with gpumesh), so that
 * video works after `npm install` alone. A system ffmpeg without libx264 (some distributions' builds) is passed
 * over for the packaged one, which has it; the reason is kept for the message if neither will do.
 */
export async function findTool(search: ToolSearch): Promise<FoundTool | MissingTool> {
  const { name, env } = search;
  const variable = overrideVariable(name);
  const override = env[variable]?.trim();
  if (override === 'none') return { missing: `${name} turned off on this host (${variable}=none)` };
  const rejected: string[] = [];
  if (override) {
    // The operator's choice (or a test's stand-in) is used as named: only that it exists is checked here.
    const path = resolveOrReject(override, env, rejected, `${variable}=${override}`);
    if (path === null) return { missing: `${name} not found (${rejected.join('; ')})` };
    return { name, path, source: 'configured', version: await versionOf(path).catch(() => 'unknown') };
  }
  const candidates: { path: () => string | null; source: FoundTool['source'] }[] = [
      { path: () => resolveOrReject(name, env, rejected, 'PATH'), source: 'system' },
      {
        path: () => {
          const packaged = search.packaged();
          if (packaged === null) rejected.push(`no ${name} package for ${process.platform}-${process.arch}`);
          return packaged;
        },
        source: 'package',
      },
    ];
  for (const candidate of candidates) {
    const path = candidate.path();
    if (path === null) continue;
    try {
      const { version, unfit } = await search.check(path);
      if (unfit === null) return { name, path, source: candidate.source, version };
      rejected.push(`${path}: ${unfit}`);
    } catch (error) {
      rejected.push(`${path} did not run: ${(error as Error).message.split('\n')[0]}`);
    }
  }
  return { missing: `${name} not found (${rejected.join('; ')})` };
}

function resolveOrReject(command: string, env: NodeJS.ProcessEnv, rejected: string[], where: string): string | null {
  try {
    return resolveExecutable(command, env);
  } catch (error) {
    if (!(error instanceof MissingExecutable)) throw error;
    rejected.push(where === 'PATH' ? 'none on PATH' : `${where}: ${error.message}`);
    return null;
  }
}

const require = createRequire(import.meta.url);

/** The binary an installer package ships for this platform; null when the package or its platform part is absent. */
export function packagedBinary(pkg: '@ffmpeg-installer/ffmpeg' | '@ffprobe-installer/ffprobe'): string | null {
  try {
    // The package picks its platform's part (an optional dependency) and throws where there is none.
    return (require(pkg) as { path: string }).path;
  } catch {
    return null;
  }
}

/** A short run of a tool, its stdout; stdin closed (a tool that waits for input gets none), killed after 5 s. */
function output(path: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(path, args, { stdio: ['ignore', 'pipe', 'ignore'], timeout: 5_000 });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (code === 0) resolve(Buffer.concat(chunks).toString('utf8'));
      // Caught by the lookups above: a tool that does not run is 'not usable', with this as the reason.
      else reject(new Error(signal ? `killed by ${signal}` : `exited with code ${code}`));
    });
  });
}

/** The first line of `<tool> -version`, without the copyright. */
async function versionOf(path: string): Promise<string> {
  const stdout = await output(path, ['-hide_banner', '-version']);
  return (stdout.split('\n')[0] ?? '').replace(/\s+Copyright.*$/, '').trim();
}

/** ffmpeg will do when it can encode H.264 with libx264: clips are made with it (see ffmpegArgs). */
export async function checkFfmpeg(path: string): Promise<{ version: string; unfit: string | null }> {
  const version = await versionOf(path);
  const stdout = await output(path, ['-hide_banner', '-encoders']);
  return { version, unfit: /^\s*V\S*\s+libx264\s/m.test(stdout) ? null : 'no libx264 encoder' };
}

export async function checkFfprobe(path: string): Promise<{ version: string; unfit: string | null }> {
  return { version: await versionOf(path), unfit: null };
}
