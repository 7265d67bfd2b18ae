import { z } from 'zod';
import { INPUT_IMAGE_FIELDS } from '../jobs.js';
import { settingsNamed, type EngineDescriptor } from './descriptor.js';

/**
 * `settings` of a model run by a command. The options type is the
 * configuration reference: every field says its default.
 */
/** What a `command` looks like, for the message when it is missing or malformed. */
const COMMAND_EXAMPLE = 'command: python3 paint.py --out ${OUTPUT_DIR} (split like a shell splits it, never run by one), or command: [python3, paint.py, --out, ${OUTPUT_DIR}]';

export const ExecSettings = z.strictObject({
  /**
   * The command: an argv array, or one string split into words the way a shell splits them (quotes,
   * backslashes) — but never run by a shell: no pipes, redirections, globs or `$VAR`s. Placeholders
   * `${INPUT}`, `${OUTPUT_DIR}`, `${JOB_ID}`, `${MODEL_PATH}`, `${IMAGE}` and `${MASK}` are filled in each argument.
   */
  command: z.union([z.array(z.string().min(1)).min(1), z.string().min(1)], {
    // The union's own message would be "Invalid input": say what is wrong and what to write instead.
    error: (issue) => (issue.input === undefined
      ? `missing: the command to run for each batch or job, e.g. ${COMMAND_EXAMPLE}`
      : `must be the command to run, one string or a list of non-empty strings, e.g. ${COMMAND_EXAMPLE}`),
  }),
  /** One process for the whole batch (true) or one per job, one after another (false, default). */
  batch: z.boolean().default(false),
  /**
   * The pictures a job may give the command (`image`: a starting picture, `mask`), each written as a PNG of the job's
   * size in the run's scratch folder: its path is `${IMAGE}` / `${MASK}` (one-job commands; empty when the job names
   * none), `GPUMESH_IMAGE` / `GPUMESH_MASK`, and the job's `pictures` in the input JSON. A job naming a picture its
   * model does not list is refused at submit. Default: none.
   */
  pictures: z.array(z.enum(INPUT_IMAGE_FIELDS)).max(INPUT_IMAGE_FIELDS.length).default([]),
  /**
   * A model that serves `video`: the command makes each clip whole (it gets the video job — prompt, frames, fps, size,
   * its starting picture — and writes an MP4 or WebM), rather than one frame per run, the agent encoding the clip.
   * Default false.
   */
  clips: z.boolean().default(false),
  /** Inputs as JSON on stdin (default) or only in the `${INPUT}` file (stdin then gets nothing). */
  input: z.enum(['stdin', 'file']).default('stdin'),
  /** A run (one process) longer than this is ended: SIGTERM to its process group, SIGKILL after `killGraceMs`. Default 10 minutes. */
  timeoutMs: z.int().positive().default(10 * 60_000),
  killGraceMs: z.int().positive().default(2000),
  /** Extra environment variables, placeholders filled. */
  env: z.record(z.string(), z.string()).default({}),
  /** Working directory. Default: the run's own scratch directory. */
  cwd: z.string().min(1).optional(),
  /** Bytes of stdout and of stderr kept for error messages (the last ones). Default 64 KiB. */
  maxOutputBytes: z.int().positive().default(64 * 1024),
  /** Most output files one job may leave. Default 32. */
  maxFiles: z.int().positive().default(32),
  /** Largest output file. Default 256 MiB. */
  maxFileBytes: z.int().positive().default(256 * 1024 * 1024),
  /**
   * The command's cgroup limits, where the agent governs with cgroups (held to the host's ceilings for `exec`,
   * `--engine-limit exec.memoryLimitMB=…`): memory in MB (exceeding it fails the jobs with ENGINE_OOM), tasks,
   * CPU weight. Default: none, 4096 tasks, weight 100.
   */
  memoryLimitMB: z.int().positive().optional(),
  pidsLimit: z.int().positive().optional(),
  cpuWeight: z.int().min(1).max(10_000).optional(),
});
export type ExecSettings = z.infer<typeof ExecSettings>;

/** Models that are commands, run once per batch or per job under the agent's governance. Inputs reach the command as JSON on stdin or in a file, never in its argv or through a shell, so no text is an instruction to it. */
export const execDescriptor: EngineDescriptor<typeof ExecSettings> = {
  name: 'exec', settings: ExecSettings, server: false, needsFile: false, controlMarkup: [],
  nativeVideo: (settings) => settings.clips === true,
  pictureInputs: (settings) => (Array.isArray(settings.pictures) ? settings.pictures.filter((field): field is string => typeof field === 'string') : []),
  pictureRefusal: (field) => `this exec model's command is given no ${field} (its settings.pictures lists what it takes, as \${${field.toUpperCase()}}); send the job to a model that takes one`,
  // The command, where it runs and what it is given: the host's alone. The rest (batching, limits, timeouts) the mesh may set.
  hostSettingsOf: settingsNamed(['command', 'cwd', 'env']), hostDeclared: true, meshSettings: ExecSettings.partial({ command: true }),
};
