import { tmpdir } from 'node:os';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import { NEVER, EngineError, type Engine, type EngineJob, type JobOutput, type LoadedModel, type Progress, type BatchResult } from '../../core/engine.js';
import { parseSettings } from '../kit/settings.js';
import { ExecBatch } from './batch.js';
import { LocalCommandRunner, type CommandRunner } from './runner.js';
import { ExecSettings } from '../../../protocol/engines/exec.js';
import { commandTemplate, fill } from './command.js';
import { sweepScratch } from './scratch.js';
import { resolveExecutable } from '../../governance/executable.js';

export interface ExecEngineOptions {
  /** Runs the processes. Default: the local runner (own process group, bounded output, timeout). */
  runner?: CommandRunner;
  /** Where each run gets its scratch directory. Default: the OS temp directory. */
  scratchRoot?: string;
}

/**
 * Models that are commands: each batch (or each job) runs the model's
 * command with the jobs as JSON, and its outputs are the files it writes.
 * Nothing stays resident between batches, so a loaded model costs no process.
 */
export class ExecEngine implements Engine {
  readonly name = 'exec';
  readonly #runner: CommandRunner;
  readonly #scratchRoot: string;
  /** Batches running, each with its run: `close` waits for them, so their scratch directories go with them. */
  readonly #batches = new Map<ExecBatch, Promise<unknown>>();
  /** The scratch directories of agents killed mid-run, removed once, before this engine's first run. */
  #swept: Promise<number> | null = null;

  constructor(options: ExecEngineOptions = {}) {
    this.#runner = options.runner ?? new LocalCommandRunner();
    this.#scratchRoot = options.scratchRoot ?? tmpdir();
  }

  async load(manifest: ModelManifest, file: string | null, device: Device): Promise<LoadedModel> {
    // A model without a file (a script that holds its own weights) gets an empty ${MODEL_PATH}.
    const modelPath = file ?? '';
    this.#swept ??= sweepScratch(this.#scratchRoot).catch(() => 0);
    await this.#swept;
    const settings = parseSettings(ExecSettings, manifest, this.name);
    const invalid = (detail: string): EngineError => new EngineError('ENGINE_FAILED', `model "${manifest.name}" (exec): ${detail}`, false);
    let argv: string[];
    try {
      argv = commandTemplate(settings);
    } catch (error) {
      throw invalid(`settings.command: ${(error as Error).message}`);
    }
    const program = fill(argv[0]!, { MODEL_PATH: modelPath } as Parameters<typeof fill>[1]);
    if (!program.includes('${')) {
      try {
        resolveExecutable(program, process.env, settings.cwd ?? process.cwd());
      } catch (error) {
        throw invalid(`settings.command: ${(error as Error).message}`);
      }
    }
    const context = { settings, argv, modelPath, runner: this.#runner, scratchRoot: this.#scratchRoot };
    const mine = new Set<ExecBatch>();
    let unloaded = false;
    return {
      manifest, device,
      // A server or command this engine does not keep running cannot die under a loaded model.
      exited: NEVER,
      // No process stays resident; the manifest's figure is what one run needs.
      memoryMB: Math.max(manifest.memoryMB, 1),
      run: async (jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<BatchResult> => {
        if (unloaded) throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" is unloaded`, true);
        const batch = new ExecBatch(context, jobs, onProgress);
        mine.add(batch);
        const running = batch.run();
        this.#batches.set(batch, running.catch(() => undefined));
        try {
          return { outputs: await running };
        } finally {
          mine.delete(batch);
          this.#batches.delete(batch);
        }
      },
      cancel: (jobIds) => {
        for (const batch of mine) batch.cancel(jobIds);
      },
      unload: async () => {
        unloaded = true;
        for (const batch of mine) batch.cancelAll();
      },
    };
  }

  /**
   * Agent shutdown: end every running command and wait for its batch to finish, so that its scratch directory is
   * removed before the agent exits (a command is stopped within its `killGraceMs`).
   */
  async close(): Promise<void> {
    for (const batch of this.#batches.keys()) batch.cancelAll();
    await Promise.all(this.#batches.values());
  }
}
