import type { ExecSettings } from '../../../protocol/engines/exec.js';

const PLACEHOLDERS = ['INPUT', 'OUTPUT_DIR', 'JOB_ID', 'MODEL_PATH', 'IMAGE', 'MASK'] as const;
export type Placeholder = (typeof PLACEHOLDERS)[number];
/** Placeholders that name one job's own: a batching command (one process for many jobs) reads them from its input. */
const ONE_JOB: ReadonlySet<string> = new Set<Placeholder>(['JOB_ID', 'IMAGE', 'MASK']);

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

/** The command's argv, checked: a known placeholder in each `${…}`, and none of one job's own when one process runs many jobs. */
// Its Errors (and splitCommand's) are caught by the exec engine's load, which reports them as ENGINE_FAILED naming settings.command.
export function commandTemplate(settings: ExecSettings): string[] {
  const argv = typeof settings.command === 'string' ? splitCommand(settings.command) : settings.command;
  if (argv.length === 0) throw new Error('settings.command is empty');
  for (const text of [...argv, ...Object.values(settings.env)]) {
    for (const [, name] of text.matchAll(PLACEHOLDER)) {
      if (!(PLACEHOLDERS as readonly string[]).includes(name!)) throw new Error(`unknown placeholder \${${name}} (known: ${PLACEHOLDERS.map((known) => `\${${known}}`).join(', ')})`);
      if (ONE_JOB.has(name!) && settings.batch) {
        const [what, instead] = name === 'JOB_ID' ? ['one job', 'the ids'] : ['one job\'s picture', 'each job\'s pictures'];
        throw new Error(`\${${name}} names ${what}, but settings.batch runs one process for many; read ${instead} from the input instead`);
      }
    }
  }
  return argv;
}

/** Fill the placeholders of one argument. */
export function fill(text: string, values: Record<Placeholder, string>): string {
  return text.replace(PLACEHOLDER, (whole, name: string) => (name in values ? values[name as Placeholder] : whole));
}
