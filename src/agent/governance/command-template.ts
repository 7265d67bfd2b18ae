/**
 * Command templates: `sd-server --model ${MODEL_PATH} --port ${PORT}` into an
 * argv, without a shell. Splitting follows the shell's quoting (single quotes
 * take everything literally; double quotes allow `${…}` and the escapes \\ \" \$;
 * a backslash outside quotes escapes the next character), but a variable's
 * value is inserted into its argument as it is — never split on spaces, never
 * interpreted — so a model setting such as `x; rm -rf ~` is one odd argument,
 * not a second command. `|`, `;`, `>` and globs are plain characters.
 */

export class TemplateError extends Error {
  override readonly name = 'TemplateError';
}

export type Variables = Readonly<Record<string, string>>;

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Split a template into argv and expand its variables. Throws a TemplateError naming what is wrong. */
export function buildArgv(template: string, variables: Variables): string[] {
  const argv: string[] = [];
  let current = '';
  let inToken = false;
  let quote: "'" | '"' | null = null;
  for (let i = 0; i < template.length; i++) {
    const char = template[i]!;
    if (quote === "'") {
      if (char === "'") quote = null;
      else current += char;
      continue;
    }
    if (char === '$' && template[i + 1] === '{') {
      const { value, end } = expandAt(template, i, variables);
      current += value;
      inToken = true;
      i = end;
      continue;
    }
    if (quote === '"') {
      if (char === '"') quote = null;
      else if (char === '\\' && ['\\', '"', '$'].includes(template[i + 1] ?? '')) current += template[++i];
      else current += char;
      continue;
    }
    if (/\s/.test(char)) {
      if (inToken) argv.push(current);
      current = '';
      inToken = false;
      continue;
    }
    inToken = true;
    if (char === "'" || char === '"') quote = char;
    else if (char === '\\') {
      if (i + 1 >= template.length) throw new TemplateError('the command ends with a lone backslash');
      current += template[++i];
    } else current += char;
  }
  if (quote) throw new TemplateError(`unterminated ${quote === '"' ? 'double' : 'single'} quote in the command`);
  if (inToken) argv.push(current);
  if (argv.length === 0 || argv[0] === '') throw new TemplateError('the command is empty');
  return argv;
}

/** Expand `${NAME}` in a single string (environment values); nothing is split. */
export function expandString(template: string, variables: Variables): string {
  let out = '';
  for (let i = 0; i < template.length; i++) {
    if (template[i] === '$' && template[i + 1] === '{') {
      const { value, end } = expandAt(template, i, variables);
      out += value;
      i = end;
    } else out += template[i];
  }
  return out;
}

function expandAt(template: string, start: number, variables: Variables): { value: string; end: number } {
  const close = template.indexOf('}', start + 2);
  if (close < 0) throw new TemplateError(`unterminated \${ at position ${start}`);
  const name = template.slice(start + 2, close);
  if (!NAME.test(name)) throw new TemplateError(`\${${name}} is not a variable name`);
  if (!Object.hasOwn(variables, name)) {
    throw new TemplateError(`unknown variable \${${name}}; known: ${Object.keys(variables).sort().map((known) => `\${${known}}`).join(', ')}`);
  }
  return { value: variables[name]!, end: close };
}
