import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { jsonCopy } from '../../src/net/json-copy.js';
import { TSX_LOADER } from '../helpers/mesh.js';

const viaText = (value: unknown): unknown => JSON.parse(JSON.stringify(value) ?? 'null');

describe('jsonCopy', () => {
  it('returns what a JSON round trip returns, for any JSON-shaped value', () => {
    fc.assert(fc.property(fc.jsonValue(), (value) => {
      expect(jsonCopy(value)).toStrictEqual(viaText(value));
    }), { numRuns: 2000 });
  });

  it('follows JSON for what JSON changes or leaves out', () => {
    const when = new Date('2026-12-04T05:00:00.000Z');
    const value = {
      gone: undefined, fn: () => 1, [Symbol('s')]: 1, nan: NaN, inf: -Infinity, negativeZero: -0, when,
      list: [undefined, () => 1, NaN, -0, 1.5e-300], tensor: [0.5, -2, 3e10], tensorWithNegativeZero: [1, -0], empty: [], nested: { a: [{ b: 'c' }] }, typed: new Uint8Array([7, 8]),
    };
    expect(jsonCopy(value)).toStrictEqual(viaText(value));
    expect(Object.is((jsonCopy({ z: -0 }) as { z: number }).z, 0)).toBe(true);
    expect(() => jsonCopy({ big: 1n })).toThrow(TypeError);
    // An own "__proto__" key (as JSON.parse makes one) stays a property; it does not become the copy's prototype.
    const tricky = JSON.parse('{"__proto__": {"polluted": true}, "a": 1}') as Record<string, unknown>;
    const copied = jsonCopy(tricky) as Record<string, unknown>;
    expect(copied).toStrictEqual(viaText(tricky));
    expect(Object.getPrototypeOf(copied)).toBe(Object.prototype);
    expect(copied.polluted).toBeUndefined();
    // Only own keys, as JSON writes them: an enumerable key a prototype holds is not copied.
    const inherits = Object.assign(Object.create({ inherited: 1 }) as Record<string, unknown>, { own: 2 });
    expect(jsonCopy(inherits)).toStrictEqual(viaText(inherits));
    expect(jsonCopy(inherits)).toStrictEqual({ own: 2 });
  });

  it('shares no object with its source', () => {
    const source = { input: { x: [1, 2, 3] }, jobs: [{ id: 'j1' }] };
    const copy = jsonCopy(source) as typeof source;
    expect(copy.input).not.toBe(source.input);
    expect(copy.input.x).not.toBe(source.input.x); // a tensor, copied whole
    expect(copy.input.x).toEqual([1, 2, 3]);
    expect(copy.jobs[0]).not.toBe(source.jobs[0]);
  });

  it('leaves a tensor of doubles as V8 holds it, once optimized: the copy does not box its numbers (V8 natives, in a child process)', () => {
    // Mixed messages (doubles, strings, objects) through the optimized copy, as the in-process link sends them; V8's
    // own test of an array's elements kind says whether the source tensor is still an array of unboxed doubles.
    const script = `
      import { jsonCopy } from ${JSON.stringify(new URL('../../src/net/json-copy.ts', import.meta.url).href)};
      const hasDoubles = new Function('a', 'return %HasDoubleElements(a)');
      let boxed = 0;
      for (let i = 0; i < 30000; i++) {
        const tensor = JSON.parse('[0.5, ' + (i + 0.25) + ', -1.5]');
        jsonCopy({ x: tensor, jobIds: ['a', 'b'], mixed: [1, 'two', { three: 3 }], small: [1, 2, 3] });
        if (!hasDoubles(tensor)) boxed++;
      }
      process.stdout.write(String(boxed));`;
    const boxed = execFileSync(process.execPath, ['--allow-natives-syntax', '--import', TSX_LOADER, '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(Number(boxed)).toBe(0);
  });
});
