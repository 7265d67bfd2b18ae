import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import cliProgress from 'cli-progress';
import type { JobEvent } from '../../protocol/index.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { CliError, parseInteger, parseSize, printJson } from '../common/output.js';
import { withClientOptions } from './shared.js';

interface SubmitOptions extends ClientOptions {
  type?: string;
  model?: string;
  prompt?: string;
  seed?: number;
  size?: string;
  steps?: number;
  frames?: number;
  fps?: number;
  input?: string;
  priority?: number;
  timeout?: number;
  idempotencyKey?: string;
  album?: string;
  wait?: boolean;
  out: string;
  save: boolean;
  json?: boolean;
}

const EXTENSIONS: Record<string, string> = { 'image/png': 'png', 'video/mp4': 'mp4', 'application/json': 'json' };

function buildInput(options: SubmitOptions): Record<string, unknown> {
  const input: Record<string, unknown> = options.input ? parseJson(options.input) : {};
  if (options.prompt !== undefined) input.prompt = options.prompt;
  if (options.seed !== undefined) input.seed = options.seed;
  if (options.steps !== undefined) input.steps = options.steps;
  if (options.frames !== undefined) input.frames = options.frames;
  if (options.fps !== undefined) input.fps = options.fps;
  if (options.size) Object.assign(input, parseSize(options.size));
  return input;
}

function parseJson(text: string): Record<string, unknown> {
  try {
    const value = JSON.parse(text) as unknown;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not an object');
    return value as Record<string, unknown>;
  } catch (error) {
    throw new CliError(`--input must be a JSON object: ${(error as Error).message}`);
  }
}

/** The job type: --type, or `video` when the flags describe a clip (--frames, --fps). */
function jobType(options: SubmitOptions): string {
  if (options.type) return options.type;
  if (options.frames !== undefined || options.fps !== undefined) return 'video';
  throw new CliError('--type is required (image, video, tensor, …), unless --frames or --fps make it a video');
}

/**
 * File names for a job's outputs: `<job>.<ext>` for each kind of file, so a clip is `<job>.mp4` beside its
 * `<job>.poster.png`; a second file of the same kind gets its index.
 */
function outputNames(jobId: string, mediaTypes: readonly string[]): string[] {
  const seen = new Map<string, number>();
  const hasVideo = mediaTypes.includes('video/mp4');
  return mediaTypes.map((mediaType) => {
    const extension = EXTENSIONS[mediaType] ?? 'bin';
    const count = seen.get(extension) ?? 0;
    seen.set(extension, count + 1);
    const kind = hasVideo && mediaType === 'image/png' ? '.poster' : '';
    return `${jobId}${kind}${count > 0 ? `-${count}` : ''}.${extension}`;
  });
}

async function submit(options: SubmitOptions): Promise<void> {
  const client = clientFrom(options);
  const accepted = await client.submit({
    type: jobType(options), model: options.model, input: buildInput(options), priority: options.priority,
    timeoutMs: options.timeout, idempotencyKey: options.idempotencyKey, album: options.album,
  });
  if (!options.wait) {
    if (options.json) printJson(accepted);
    else process.stdout.write(`${accepted.id} ${accepted.status}\n${client.url(accepted.links.self)}\n`);
    return;
  }
  const bar = options.json ? null : new cliProgress.SingleBar({
    format: '{bar} {percentage}% | step {value}/{total} | {state}', hideCursor: true, noTTYOutput: true, notTTYSchedule: 1000,
    stream: process.stderr,
  }, cliProgress.Presets.shades_classic);
  bar?.start(1, 0, { state: 'queued' });
  const terminal = await client.follow(accepted.id, (event: JobEvent) => {
    if (!bar) return;
    if (event.type === 'dispatched') bar.update({ state: `on ${event.host} (batch of ${event.batchSize})` });
    if (event.type === 'loading') bar.update({ state: event.loadMs === undefined ? `loading ${event.model} on ${event.host}` : `${event.model} loaded in ${(event.loadMs / 1000).toFixed(1)} s` });
    if (event.type === 'running') bar.update({ state: `running on ${event.host}` });
    if (event.type === 'progress') {
      bar.setTotal(event.total);
      bar.update(event.step);
    }
  });
  bar?.stop();
  if (terminal.type !== 'succeeded') {
    const detail = terminal.type === 'failed' ? `${terminal.error.code}: ${terminal.error.message}` : terminal.type;
    throw new CliError(`job ${accepted.id} ${terminal.type}: ${detail}`, 1);
  }
  const saved: string[] = [];
  if (options.save) {
    const dir = resolve(options.out);
    mkdirSync(dir, { recursive: true });
    const names = outputNames(accepted.id, terminal.artifacts.map((artifact) => artifact.mediaType));
    for (const [index, artifact] of terminal.artifacts.entries()) {
      const path = join(dir, names[index]!);
      await client.downloadTo(artifact.url, path);
      saved.push(path);
    }
  }
  if (options.json) {
    printJson({ ...terminal, saved });
    return;
  }
  const lines = [`${accepted.id} succeeded`];
  terminal.artifacts.forEach((artifact, index) => {
    lines.push(`  url   ${client.url(artifact.url)}`);
    if (saved[index]) lines.push(`  file  ${saved[index]}`);
  });
  if (terminal.result !== null && terminal.result !== undefined) lines.push(`  result ${JSON.stringify(terminal.result)}`);
  process.stdout.write(`${lines.join('\n')}\n`);
}

export function submitCommand(): Command {
  return withClientOptions(new Command('submit'))
    .description('Submit a job; with --wait, follow its progress and fetch its outputs')
    .option('-t, --type <type>', 'job type: image, video, tensor, … (default: video with --frames or --fps)')
    .option('-m, --model <name>', 'model (default: the config\'s default for the type)')
    .option('-p, --prompt <text>', 'prompt (image jobs)')
    .option('--seed <n>', 'seed; the same prompt and seed give the same image', parseInteger('--seed'))
    .option('--size <WxH>', 'image size, e.g. 256x256')
    .option('--steps <n>', 'refinement steps (per frame for a video)', parseInteger('--steps'))
    .option('--frames <n>', 'video: frames in the clip (default 48)', parseInteger('--frames'))
    .option('--fps <n>', 'video: frames per second (default 24)', parseInteger('--fps'))
    .option('--input <json>', 'the whole input as a JSON object (merged under the flags above)')
    .option('--priority <n>', '1 is the highest', parseInteger('--priority'))
    .option('--timeout <ms>', 'deadline in milliseconds from now', parseInteger('--timeout'))
    .option('--idempotency-key <key>', 'a retry with the same key returns the same job')
    .option('--album <name>', 'gallery album for the result')
    .option('-w, --wait', 'wait for the job, showing its progress')
    .option('-o, --out <dir>', 'where --wait saves outputs', 'gpumesh-out')
    .option('--no-save', 'with --wait, do not download outputs')
    .option('--json', 'print JSON instead of text')
    .action((options: SubmitOptions) => submit(options));
}
