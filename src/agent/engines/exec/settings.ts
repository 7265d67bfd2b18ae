import { z } from 'zod';

/**
 * `settings` of a model run by a command. The options type is the
 * configuration reference: every field says its default.
 */
export const ExecSettings = z.strictObject({
  /**
   * The command: an argv array, or one string split into words the way a shell splits them (quotes,
   * backslashes) — but never run by a shell: no pipes, redirections, globs or `$VAR`s. Placeholders
   * `${INPUT}`, `${OUTPUT_DIR}`, `${JOB_ID}` and `${MODEL_PATH}` are filled in each argument.
   */
  command: z.union([z.array(z.string().min(1)).min(1), z.string().min(1)]),
  /** One process for the whole batch (true) or one per job, one after another (false, default). */
  batch: z.boolean().default(false),
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

export const PLACEHOLDERS = ['INPUT', 'OUTPUT_DIR', 'JOB_ID', 'MODEL_PATH'] as const;
export type Placeholder = (typeof PLACEHOLDERS)[number];

/**
 * Split a command line into words as a POSIX shell would — whitespace
 * separates; '…' is literal; "…" keeps spaces and honours \" \\ \$ \`;
 * a backslash outside quotes escapes the next character — and nothing else.
 */
export function splitCommand(line: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  for (let i = 0; i < line.length; i++) {
    const char = line[i]!;
    if (char === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new Error('unterminated single quote');
      word += line.slice(i + 1, end);
      inWord = true;
      i = end;
    } else if (char === '"') {
      inWord = true;
      for (i++; ; i++) {
        if (i >= line.length) throw new Error('unterminated double quote');
        const inner = line[i]!;
        if (inner === '"') break;
        if (inner === '\\' && i + 1 < line.length && '"\\$`'.includes(line[i + 1]!)) word += line[++i];
        else word += inner;
      }
    } else if (char === '\\') {
      if (i + 1 >= line.length) throw new Error('a backslash ends the command');
      word += line[++i];
      inWord = true;
    } else if (/\s/.test(char)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      word += char;
      inWord = true;
    }
  }
  if (inWord) words.push(word);
  return words;
}

const PLACEHOLDER = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** The command's argv, checked: a known placeholder in each `${…}`, and no `${JOB_ID}` when one process runs many jobs. */
export function commandTemplate(settings: ExecSettings): string[] {
  const argv = typeof settings.command === 'string' ? splitCommand(settings.command) : settings.command;
  if (argv.length === 0) throw new Error('settings.command is empty');
  for (const text of [...argv, ...Object.values(settings.env)]) {
    for (const [, name] of text.matchAll(PLACEHOLDER)) {
      if (!(PLACEHOLDERS as readonly string[]).includes(name!)) throw new Error(`unknown placeholder \${${name}} (known: ${PLACEHOLDERS.map((known) => `\${${known}}`).join(', ')})`);
      if (name === 'JOB_ID' && settings.batch) throw new Error('${JOB_ID} names one job, but settings.batch runs one process for many; read the ids from the input instead');
    }
  }
  return argv;
}

/** Fill the placeholders of one argument. */
export function fill(text: string, values: Record<Placeholder, string>): string {
  return text.replace(PLACEHOLDER, (whole, name: string) => (name in values ? values[name as Placeholder] : whole));
}
