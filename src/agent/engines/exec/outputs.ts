import { lstat, readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import type { OutputFile } from '../../core/engine.js';
import { describeOutput } from '../kit/media.js';

/** The JSON result a command may leave next to its files. */
const RESULT_FILE = 'result.json';

export interface CollectLimits {
  maxFiles: number;
  maxFileBytes: number;
}

/** Files under a directory, depth first, sorted by path; links and other non-files are skipped. */
async function walk(dir: string, root: string, found: string[]): Promise<void> {
  const entries = await readdir(dir, { withFileTypes: true });
  entries.sort((a, b) => a.name.localeCompare(b.name, 'en', { numeric: true }));
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await walk(path, root, found);
    else if (entry.isFile()) found.push(relative(root, path));
  }
}

/**
 * What a command left for one job in its output directory: every file (its
 * media type from its bytes, else its name) and `result.json`, parsed, as the
 * job's JSON result.
 */
export async function collectOutputs(dir: string, limits: CollectLimits): Promise<{ files: OutputFile[]; result?: unknown }> {
  const names: string[] = [];
  await walk(dir, dir, names);
  let result: unknown;
  const files: OutputFile[] = [];
  const fileNames = names.filter((name) => name !== RESULT_FILE);
  // These Errors are caught by the batch (batch.ts), which fails the job with ENGINE_FAILED quoting them.
  if (fileNames.length > limits.maxFiles) throw new Error(`it wrote ${fileNames.length} files, more than settings.maxFiles (${limits.maxFiles})`);
  if (names.includes(RESULT_FILE)) {
    const text = await readFile(join(dir, RESULT_FILE), 'utf8');
    try {
      result = JSON.parse(text);
    } catch (error) {
      throw new Error(`its ${RESULT_FILE} is not JSON: ${(error as Error).message}`);
    }
  }
  for (const name of fileNames) {
    const path = join(dir, name);
    const { size } = await lstat(path);
    if (size > limits.maxFileBytes) throw new Error(`its file ${name} has ${size} bytes, more than settings.maxFileBytes (${limits.maxFileBytes})`);
    files.push(await describeOutput(name, new Uint8Array(await readFile(path))));
  }
  return result === undefined ? { files } : { files, result };
}
