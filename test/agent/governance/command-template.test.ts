import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildArgv, expandString, TemplateError } from '../../../src/agent/governance/index.js';

const vars = { PORT: '4242', MODEL_PATH: '/models/my model.gguf', GPU: '0', EMPTY: '' };

describe('command templates (argv without a shell)', () => {
  it('splits on whitespace and expands variables inside their argument', () => {
    expect(buildArgv('sd-server --model ${MODEL_PATH} --port ${PORT}  --listen-ip 127.0.0.1', vars))
      .toEqual(['sd-server', '--model', '/models/my model.gguf', '--port', '4242', '--listen-ip', '127.0.0.1']);
    expect(buildArgv('serve --addr=127.0.0.1:${PORT} --gpu "${GPU}"', vars)).toEqual(['serve', '--addr=127.0.0.1:4242', '--gpu', '0']);
  });

  it('follows shell quoting: single quotes are literal, double quotes expand, backslash escapes', () => {
    expect(buildArgv(`run 'a b ${'${PORT}'}' "c ${'${PORT}'} \\"q\\"" d\\ e \\$x`, vars))
      .toEqual(['run', 'a b ${PORT}', 'c 4242 "q"', 'd e', '$x']);
    expect(buildArgv(`run '' "" ${'${EMPTY}'}`, vars)).toEqual(['run', '', '', '']);
    expect(buildArgv('a$b $ c', vars)).toEqual(['a$b', '$', 'c']);
  });

  it('a value never becomes a second command or more arguments: shell syntax in it is inert', () => {
    const hostile = { ...vars, MODEL_PATH: 'x; rm -rf ~ && $(reboot) `id` | tee /etc/passwd > /dev/null "\' ${PORT}' };
    const argv = buildArgv('sd-server --model ${MODEL_PATH} --port ${PORT}', hostile);
    expect(argv).toEqual(['sd-server', '--model', hostile.MODEL_PATH, '--port', '4242']);
    // Metacharacters in the template itself are plain characters too.
    expect(buildArgv('echo a|b;c >d', vars)).toEqual(['echo', 'a|b;c', '>d']);
  });

  it('any value expands to exactly one argument, unchanged (property)', () => {
    fc.assert(fc.property(fc.string(), fc.string(), (value, other) => {
      const argv = buildArgv('prog --x ${V} --y "${W}" ${V}', { V: value, W: other });
      expect(argv).toEqual(['prog', '--x', value, '--y', other, value]);
    }));
  });

  it('names what is wrong: unknown variables, unterminated quotes, an empty command', () => {
    expect(() => buildArgv('sd-server --port ${PROT}', vars)).toThrow(/unknown variable \$\{PROT\}; known: .*\$\{PORT\}/);
    expect(() => buildArgv('sd-server "--port', vars)).toThrow(/unterminated double quote/);
    expect(() => buildArgv("sd-server '--port", vars)).toThrow(/unterminated single quote/);
    expect(() => buildArgv('sd-server ${PORT', vars)).toThrow(TemplateError);
    expect(() => buildArgv('sd-server ${1x}', vars)).toThrow(/not a variable name/);
    expect(() => buildArgv('   ', vars)).toThrow(/empty/);
    expect(() => buildArgv('${EMPTY} --x', vars)).toThrow(/empty/);
  });

  it('expands environment values without splitting them', () => {
    expect(expandString('http://127.0.0.1:${PORT}/ ${MODEL_PATH}', vars)).toBe('http://127.0.0.1:4242/ /models/my model.gguf');
    expect(() => expandString('${NOPE}', vars)).toThrow(/unknown variable/);
  });
});
