import type { ErrorCode } from '../../../protocol/index.js';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { EngineJob, JobOutput, Progress } from '../../core/engine.js';
import { BatchProgress } from '../kit/batch-progress.js';
import { maskAsPng, pictureAsPng } from '../kit/picture-png.js';
import { collectOutputs } from './outputs.js';
import type { CommandResult, CommandRunner } from './runner.js';
import { execDescriptor, type ExecSettings } from '../../../protocol/engines/exec.js';
import { fill, type Placeholder } from './command.js';
import { makeScratch } from './scratch.js';

export interface ExecContext {
  settings: ExecSettings;
  /** The command with its placeholders. */
  argv: string[];
  modelPath: string;
  runner: CommandRunner;
  /** Where each run gets its scratch directory (input file, output directories). */
  scratchRoot: string;
}

type JobError = Extract<JobOutput, { ok: false }>;
interface Member { job: EngineJob; index: number }

/** A command that fails this way says "try again" (EX_TEMPFAIL from sysexits.h). */
const EXIT_TEMPFAIL = 75;

/** The last lines of a command's stderr, short enough for a job error. */
function lastLines(text: string, lines = 10, chars = 2000): string {
  const tail = text.trimEnd().split('\n').slice(-lines).join('\n');
  return tail.length > chars ? `…${tail.slice(-chars)}` : tail;
}

/**
 * A job's pictures (`image`, `mask`: fetched, checked and decoded by the agent, sized to the job) written as PNG files
 * in `dir`; their paths by field (none: the job names none). Only the fields its model lists reach here: the
 * orchestrator refuses a job naming another (ExecSettings.pictures).
 */
async function writePictures(dir: string, job: EngineJob): Promise<Partial<Record<'image' | 'mask', string>>> {
  const { image, mask } = job.pictures ?? {};
  if (!image && !mask) return {};
  await mkdir(dir, { recursive: true });
  const paths: Partial<Record<'image' | 'mask', string>> = {};
  if (image) await writeFile(paths.image = join(dir, 'image.png'), await pictureAsPng(image));
  if (mask) await writeFile(paths.mask = join(dir, 'mask.png'), await maskAsPng(mask));
  return paths;
}

/** A job id as a directory name: itself when it is a plain name, else its place in the batch. */
const dirName = (id: string, position: number): string => (/^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/.test(id) ? id : `job-${position}`);

/**
 * One batch through a command: one process for the whole batch when the
 * command batches, else one process per job, one after another. A process
 * reads its jobs as JSON (stdin or the `${INPUT}` file) and their pictures as
 * PNG files (`${IMAGE}`, `${MASK}`, or each job's `pictures`), reports progress
 * as JSON lines on stdout and leaves each job's files (and an optional
 * result.json) in that job's output directory.
 */
export class ExecBatch {
  readonly #context: ExecContext;
  readonly #jobs: readonly EngineJob[];
  readonly #progress: BatchProgress;
  readonly #cancelled = new Set<string>();
  #current: { jobIds: string[]; controller: AbortController } | null = null;

  constructor(context: ExecContext, jobs: readonly EngineJob[], onProgress: (progress: Progress) => void) {
    this.#context = context;
    this.#jobs = jobs;
    this.#progress = new BatchProgress(context.settings.batch ? 1 : jobs.length, onProgress);
  }

  /** A cancelled job that has not started is skipped; a process is ended once every job it runs is cancelled. */
  cancel(jobIds: readonly string[]): void {
    for (const id of jobIds) if (this.#jobs.some((job) => job.id === id)) this.#cancelled.add(id);
    const current = this.#current;
    if (current && current.jobIds.every((id) => this.#cancelled.has(id))) current.controller.abort();
  }

  /** Shutdown: every job of the batch. */
  cancelAll(): void {
    this.cancel(this.#jobs.map((job) => job.id));
  }

  async run(): Promise<JobOutput[]> {
    const all = this.#jobs.map((job, index) => ({ job, index }));
    // A picture the command is not given would be dropped without a word: the job is refused instead (the orchestrator
    // refuses it at submit; this host's own settings may list fewer pictures than the mesh's).
    const refused = new Map(all.flatMap((member) => {
      const field = Object.keys(member.job.pictures ?? {}).find((name) => !(this.#context.settings.pictures as readonly string[]).includes(name));
      if (field === undefined) return [];
      // A batching command's one bar is the process's, whoever it runs.
      if (!this.#context.settings.batch) this.#progress.complete(member.index);
      return [[member.job.id, this.#failure(member, 'INVALID_INPUT', `${field}: ${execDescriptor.pictureRefusal!(field)}`, false)] as const];
    }));
    const members = all.filter((member) => !refused.has(member.job.id));
    const outputs: JobOutput[] = [];
    if (!this.#context.settings.batch) for (const member of members) outputs.push(...await this.#process([member]));
    else if (members.length > 0) outputs.push(...await this.#process(members));
    else this.#progress.complete(0);
    const byJob = new Map(outputs.map((output) => [output.jobId, output]));
    return this.#jobs.map((job) => {
      const output = refused.get(job.id) ?? byJob.get(job.id)!;
      return this.#cancelled.has(job.id) ? { jobId: job.id, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false } : output;
    });
  }

  async #process(members: Member[]): Promise<JobOutput[]> {
    const { settings, runner, scratchRoot, modelPath } = this.#context;
    const batch = settings.batch;
    const progressIndex = (member: Member): number => (batch ? 0 : member.index);
    if (members.every((member) => this.#cancelled.has(member.job.id))) {
      members.forEach((member) => this.#progress.complete(progressIndex(member)));
      return members.map((member) => this.#failure(member, 'CANCELLED', 'cancelled', false));
    }
    const scratch = await makeScratch(scratchRoot);
    try {
      const outputDir = join(scratch, 'out');
      const dirs = members.map((member, position) => (batch ? join(outputDir, dirName(member.job.id, position)) : outputDir));
      await Promise.all(dirs.map((dir) => mkdir(dir, { recursive: true })));
      // Each job's pictures as PNG files beside its input: the command opens them as files, as any image tool does.
      const pictures = await Promise.all(members.map((member, position) => writePictures(join(scratch, 'pictures', dirName(member.job.id, position)), member.job)));
      const entries = members.map((member, position) => ({
        id: member.job.id, input: member.job.input, outputDir: dirs[position], ...(Object.keys(pictures[position]!).length > 0 ? { pictures: pictures[position] } : {}),
      }));
      const inputPath = join(scratch, 'input.json');
      const inputJson = JSON.stringify(batch ? { jobs: entries } : entries[0]);
      await writeFile(inputPath, inputJson);
      // The command may run as another user than the agent (an agent running as root): the scratch is its to write in.
      await runner.handOver?.(scratch);
      const own = batch ? {} : pictures[0]!;
      const values: Record<Placeholder, string> = {
        INPUT: inputPath, OUTPUT_DIR: outputDir, JOB_ID: batch ? '' : members[0]!.job.id, MODEL_PATH: modelPath, IMAGE: own.image ?? '', MASK: own.mask ?? '',
      };
      const env: NodeJS.ProcessEnv = {
        // The agent's own GPUMESH_* variables (its grant among them) are not the command's business.
        ...Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('GPUMESH_'))),
        ...Object.fromEntries(Object.entries(settings.env).map(([key, value]) => [key, fill(value, values)])),
        GPUMESH_INPUT: values.INPUT, GPUMESH_OUTPUT_DIR: values.OUTPUT_DIR, GPUMESH_MODEL_PATH: values.MODEL_PATH,
        ...(batch ? {} : { GPUMESH_JOB_ID: values.JOB_ID }),
        ...(own.image ? { GPUMESH_IMAGE: own.image } : {}), ...(own.mask ? { GPUMESH_MASK: own.mask } : {}),
      };
      const reported = new Map<string, JobError>();
      const controller = new AbortController();
      this.#current = { jobIds: members.map((member) => member.job.id), controller };
      let result: CommandResult;
      try {
        result = await runner.run({
          argv: this.#context.argv.map((arg) => fill(arg, values)), cwd: settings.cwd ?? scratch, env,
          stdin: settings.input === 'stdin' ? inputJson : null,
          timeoutMs: settings.timeoutMs, maxOutputBytes: settings.maxOutputBytes, killGraceMs: settings.killGraceMs,
          limits: { memoryLimitMB: settings.memoryLimitMB, pidsLimit: settings.pidsLimit, cpuWeight: settings.cpuWeight },
        }, {
          signal: controller.signal,
          onStdoutLine: (line) => this.#onLine(line, members, progressIndex, reported),
        });
      } finally {
        this.#current = null;
        members.forEach((member) => this.#progress.complete(progressIndex(member)));
      }
      const failure = this.#processFailure(result);
      if (failure) return members.map((member) => this.#failure(member, ...failure));
      // Awaited here, not returned pending: the `finally` below removes the files being read.
      return await Promise.all(members.map(async (member, position): Promise<JobOutput> => {
        const own = reported.get(member.job.id);
        if (own) return own;
        try {
          const collected = await collectOutputs(dirs[position]!, settings);
          if (collected.files.length === 0 && collected.result === undefined) {
            return this.#failure(member, 'ENGINE_FAILED', `${this.#name()} left no files and no result.json in its output directory`, false);
          }
          return { jobId: member.job.id, ok: true, ...collected };
        } catch (error) {
          return this.#failure(member, 'ENGINE_FAILED', `${this.#name()}: ${(error as Error).message}`, false);
        }
      }));
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }

  /** `{"progress": {"step", "total", "job"?}}` moves the bar; `{"error": {"job", "message", "retryable"?}}` fails one job. Other lines are the command's own. */
  #onLine(line: string, members: Member[], progressIndex: (member: Member) => number, reported: Map<string, JobError>): void {
    if (!line.startsWith('{')) return;
    let message: { progress?: { step?: unknown; total?: unknown; job?: unknown }; error?: { job?: unknown; message?: unknown; retryable?: unknown } };
    try {
      message = JSON.parse(line);
    } catch {
      return;
    }
    if (message.progress) {
      const { step, total, job } = message.progress;
      const member = job === undefined ? members[0] : members.find((candidate) => candidate.job.id === job);
      if (member && typeof step === 'number' && typeof total === 'number') this.#progress.report(progressIndex(member), step, total);
    }
    if (message.error) {
      const member = message.error.job === undefined && members.length === 1 ? members[0] : members.find((candidate) => candidate.job.id === message.error!.job);
      if (member) reported.set(member.job.id, this.#failure(member, 'ENGINE_FAILED', `${this.#name()} failed the job: ${String(message.error.message ?? 'no reason given')}`, message.error.retryable === true));
    }
  }

  /** How the process ended, when that fails all of its jobs. */
  #processFailure(result: CommandResult): [code: ErrorCode, message: string, retryable: boolean] | null {
    const name = this.#name();
    const stderr = lastLines(result.stderrTail);
    const said = stderr ? `; its last stderr lines:\n${stderr}` : '';
    if (result.spawnError) return ['ENGINE_FAILED', `${name} could not start: ${result.spawnError}`, false];
    if (result.oom) return ['ENGINE_OOM', `${result.oom}${said}`, true];
    if (result.stopped === 'cancelled') return ['CANCELLED', 'cancelled', false];
    if (result.stopped === 'timeout') return ['ENGINE_FAILED', `${name} ran longer than ${this.#context.settings.timeoutMs} ms and was stopped${said}`, true];
    if (result.signal) return ['ENGINE_CRASHED', `${name} was killed by ${result.signal}${said}`, true];
    if (result.exitCode !== 0) return ['ENGINE_FAILED', `${name} exited with code ${result.exitCode}${said}`, result.exitCode === EXIT_TEMPFAIL];
    return null;
  }

  #name(): string {
    return `the command ${this.#context.argv[0]}`;
  }

  #failure(member: Member, code: ErrorCode, message: string, retryable: boolean): JobError {
    return { jobId: member.job.id, ok: false, code, message, retryable };
  }
}
