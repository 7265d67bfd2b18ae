import { constants, mkdirSync } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import type { ExplainView, JobEvent } from '../../protocol/api/index.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { CliError, parseInteger, parseSize, printJson } from '../common/output.js';
import { withClientOptions } from './shared.js';
import { ApiError, type MeshClient } from '../common/client.js';
import { deleteStored, uploadPicture, type UploadedFile } from '../common/upload.js';
import { systemClock, type Timer } from '../../protocol/clock.js';

const collect = (value: string, previous: string[]): string[] => [...previous, value];

function parseFraction(value: string): number {
  const number = Number(value);
  if (!Number.isFinite(number) || number < 0 || number > 1) throw new CliError(`--strength must be a number from 0 to 1, not "${value}"`);
  return number;
}

interface SubmitOptions extends ClientOptions {
  type?: string;
  model?: string;
  prompt?: string;
  seed?: number;
  size?: string;
  steps?: number;
  frames?: number;
  fps?: number;
  input: string[];
  strength?: number;
  priority?: number;
  timeout?: number;
  idempotencyKey?: string;
  album?: string;
  webhook?: string;
  wait?: boolean;
  out: string;
  save: boolean;
  json?: boolean;
}

const EXTENSIONS: Record<string, string> = { 'image/png': 'png', 'video/mp4': 'mp4', 'application/json': 'json' };

/**
 * The job's input: `--input` JSON objects merged in order, `--input field=./file` uploading the file and naming its
 * digest (pictures a job starts from: `image`, `mask`), then the flags. Everything that can be found wrong here — a
 * JSON item, a flag, a file that cannot be read — is, before the first file is uploaded: a command refused on the spot
 * stores nothing. A picture the orchestrator refuses deletes those this command stored before it, and the files it
 * stored come back with the input, so that a job the orchestrator refuses deletes them too.
 */
async function buildInput(options: SubmitOptions, client: MeshClient): Promise<{ input: Record<string, unknown>; stored: UploadedFile[] }> {
  const input: Record<string, unknown> = {};
  // Each field's file, in the order given: a later item or a flag naming the field wins, as when merged in turn.
  const files = new Map<string, string>();
  const set = (values: Record<string, unknown>): void => {
    for (const field of Object.keys(values)) files.delete(field);
    Object.assign(input, values);
  };
  for (const item of options.input) {
    // `image=@j_…` (or `@j_…:1`): another job's output, by reference; the job waits for that job to succeed.
    const reference = /^([A-Za-z_][\w-]*)=@(j_[A-Za-z0-9_-]+)(?::(\d+))?$/.exec(item);
    if (reference) {
      const [, field, fromJob, output] = reference as unknown as [string, string, string, string | undefined];
      set({ [field]: { fromJob, output: output === undefined ? 0 : Number(output) } });
      continue;
    }
    const file = /^([A-Za-z_][\w-]*)=(.+)$/.exec(item);
    if (item.trimStart().startsWith('{') || !file) {
      set(parseJson(item));
      continue;
    }
    const [, field, path] = file as unknown as [string, string, string];
    try {
      if (!(await stat(path)).isFile()) throw new Error('not a file');
      await access(path, constants.R_OK);
    } catch (error) {
      throw new CliError(`--input ${field}=${path}: cannot read the file (${(error as Error).message})`);
    }
    delete input[field];
    files.delete(field);
    files.set(field, path);
  }
  const flags: Record<string, unknown> = {
    strength: options.strength, prompt: options.prompt, seed: options.seed, steps: options.steps, frames: options.frames, fps: options.fps,
    ...(options.size ? parseSize(options.size) : {}),
  };
  set(Object.fromEntries(Object.entries(flags).filter(([, value]) => value !== undefined)));
  const stored: UploadedFile[] = [];
  for (const [field, path] of files) {
    try {
      const file = await uploadPicture(client, path);
      stored.push(file);
      input[field] = file.digest;
    } catch (error) {
      await deleteStored(client, stored);
      if (error instanceof ApiError) throw new CliError(`--input ${field}=${path}: ${error.message}`);
      throw new CliError(`--input ${field}=${path}: cannot read the file (${(error as Error).message})`);
    }
  }
  return { input, stored };
}

function parseJson(text: string): Record<string, unknown> {
  try {
    const value = JSON.parse(text) as unknown;
    // Caught below: a CliError naming --input.
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not an object');
    return value as Record<string, unknown>;
  } catch (error) {
    throw new CliError(`--input must be a JSON object: ${(error as Error).message}`);
  }
}

/** The job type: --type, `video` when the flags describe a clip (--frames, --fps), else `image` for a prompt or a picture. */
function jobType(options: SubmitOptions): string {
  if (options.type) return options.type;
  if (options.frames !== undefined || options.fps !== undefined) return 'video';
  if (options.prompt !== undefined || options.strength !== undefined || options.input.some((item) => item.startsWith('image='))) return 'image';
  throw new CliError('--type is required (image, video, tensor, …), unless --prompt makes it an image or --frames or --fps a video');
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

/** After QUEUED_QUIET_MS still queued, and every QUEUED_EXPLAIN_MS after, the job's explain summary; stop() ends it. */
const QUEUED_QUIET_MS = 2000;
const QUEUED_EXPLAIN_MS = 5000;

function explainWhileQueued(client: MeshClient, id: string, say: (summary: string) => void): { stop(): void } {
  let stopped = false;
  let timer: Timer | null = null;
  const look = async (): Promise<void> => {
    try {
      const view = await client.request<ExplainView>('GET', `/v1/jobs/${encodeURIComponent(id)}/explain`);
      if (!stopped && view.status === 'queued' && view.summary) say(view.summary);
    } catch {
      // Only a hint: the event stream says what happens, and reports a mesh that went away.
    }
    if (!stopped) timer = systemClock.setTimer(QUEUED_EXPLAIN_MS, () => void look());
  };
  timer = systemClock.setTimer(QUEUED_QUIET_MS, () => void look());
  return {
    stop() {
      stopped = true;
      timer?.cancel();
    },
  };
}

async function submit(options: SubmitOptions): Promise<void> {
  const client = clientFrom(options);
  const { input, stored } = await buildInput(options, client);
  let accepted: Awaited<ReturnType<MeshClient['submit']>>;
  try {
    accepted = await client.submit({
      type: jobType(options), model: options.model, input, priority: options.priority,
      timeoutMs: options.timeout, idempotencyKey: options.idempotencyKey, album: options.album,
      ...(options.webhook ? { webhook: options.webhook } : {}),
    });
  } catch (error) {
    // Refused (or not known to be taken): the pictures stored for it go. A job the orchestrator took without the
    // answer arriving names them still — deleting a picture a job named keeps its bytes for that job.
    await deleteStored(client, stored);
    throw error;
  }
  if (!options.wait) {
    if (options.json) printJson(accepted);
    else process.stdout.write(`${accepted.id} ${accepted.status}\n${client.url(accepted.links.self)}\n`);
    return;
  }
  const cliProgress = options.json ? null : (await import('cli-progress')).default;
  const bar = !cliProgress ? null : new cliProgress.SingleBar({
    format: '{bar} {percentage}% | step {value}/{total} | {state}', hideCursor: true, noTTYOutput: true, notTTYSchedule: 1000,
    stream: process.stderr,
  }, cliProgress.Presets.shades_classic);
  bar?.start(1, 0, { state: 'queued' });
  // A job still queued after a moment says why, in the orchestrator's words (its explain summary: a host it waits for,
  // a class no connected host can serve), so a clip waiting for a host that has no ffmpeg does not just say "queued".
  const why = bar ? explainWhileQueued(client, accepted.id, (summary) => bar.update({ state: `queued: ${summary}` })) : null;
  const terminal = await client.follow(accepted.id, (event: JobEvent) => {
    if (!bar) return;
    if (event.type !== 'queued' && event.type !== 'waiting') why?.stop();
    if (event.type === 'waiting') bar.update({ state: `waiting for ${event.for.join(', ')}` });
    if (event.type === 'dispatched') bar.update({ state: `on ${event.host} (batch of ${event.batchSize})` });
    if (event.type === 'loading') bar.update({ state: event.loadMs === undefined ? `loading ${event.model} on ${event.host}` : `${event.model} loaded in ${(event.loadMs / 1000).toFixed(1)} s` });
    if (event.type === 'running') bar.update({ state: `running on ${event.host}` });
    if (event.type === 'progress') {
      bar.setTotal(event.total);
      bar.update(event.step);
    }
  });
  why?.stop();
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
    .option('-t, --type <type>', 'job type: image, video, tensor, … (default: video with --frames or --fps, else image with --prompt)')
    .option('-m, --model <name>', 'model (default: the config\'s default for the type)')
    .option('-p, --prompt <text>', 'prompt (image jobs)')
    .option('--seed <n>', 'seed; the same prompt and seed give the same image', parseInteger('--seed'))
    .option('--size <WxH>', 'image size, e.g. 256x256')
    .option('--steps <n>', 'refinement steps (per frame for a video)', parseInteger('--steps'))
    .option('--frames <n>', 'video: frames in the clip (default 48)', parseInteger('--frames'))
    .option('--fps <n>', 'video: frames per second (default 24)', parseInteger('--fps'))
    .option('--input <json|field=file|field=@job>', 'the input as a JSON object (merged under the flags above), a file to upload and name by digest, e.g. image=./photo.png, or another job\'s output, e.g. image=@j_… (its first output; @j_…:1 the second): the job waits for that one (repeatable)', collect, [])
    .option('--strength <0..1>', 'image-to-image: how far the result may move from --input image=… (0 keeps it, 1 repaints it; default 0.6)', parseFraction)
    .option('--priority <n>', '1 is the highest', parseInteger('--priority'))
    .option('--timeout <ms>', 'deadline in milliseconds from now', parseInteger('--timeout'))
    .option('--idempotency-key <key>', 'a retry with the same key returns the same job')
    .option('--album <name>', 'gallery album for the result')
    .option('--webhook <url>', 'POST the job\'s end here, signed (a URL mesh.yaml\'s webhooks.allow allows; default: the grant\'s)')
    .option('-w, --wait', 'wait for the job, showing its progress')
    .option('-o, --out <dir>', 'where --wait saves outputs', 'gpumesh-out')
    .option('--no-save', 'with --wait, do not download outputs')
    .option('--json', 'print JSON instead of text')
    .action((options: SubmitOptions) => submit(options));
}
