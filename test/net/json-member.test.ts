import { describe, expect, it } from 'vitest';
import { memberJson } from '../../src/net/json-member.js';

/** Every way JSON may space a document: none, spaces, tabs and newlines around every token. */
const SPACINGS = ['', ' ', '\n\t ', '\r\n'];

/** A JSON value of a few levels: numbers in every notation, strings with escapes and brackets, nested containers. */
function randomValue(random: () => number, depth: number): unknown {
  const kind = Math.floor(random() * (depth > 2 ? 4 : 6));
  switch (kind) {
    case 0: return [1.5, -0.25, 1e-7, 12345678901234567890, -0, 0][Math.floor(random() * 6)];
    case 1: return ['plain', 'with "quotes"', 'brackets ] } [ {', 'back\\slash\\', 'unicode é ✓', '\\"', ''][Math.floor(random() * 7)];
    case 2: return [true, false, null][Math.floor(random() * 3)];
    case 3: return Math.sin(random() * 1000);
    case 4: return Array.from({ length: Math.floor(random() * 5) }, () => randomValue(random, depth + 1));
    default: return Object.fromEntries(Array.from({ length: Math.floor(random() * 4) }, (_, i) => [`k${i}${['', ']', '"', '{'][i % 4]}`, randomValue(random, depth + 1)]));
  }
}

/** JSON.stringify with `spacing` between every token (the text JSON.parse accepts as the same value). */
function spaced(value: unknown, spacing: string): string {
  if (Array.isArray(value)) return `[${spacing}${value.map((item) => spaced(item, spacing)).join(`${spacing},${spacing}`)}${spacing}]`;
  if (value !== null && typeof value === 'object') {
    const members = Object.entries(value).map(([key, item]) => `${JSON.stringify(key)}${spacing}:${spacing}${spaced(item, spacing)}`);
    return `{${spacing}${members.join(`${spacing},${spacing}`)}${spacing}}`;
  }
  return JSON.stringify(value);
}

/** A seeded generator (mulberry32), so a failure can be replayed. */
function seeded(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('memberJson', () => {
  it('cuts a member\'s text out as it was written, which reads back as JSON.parse reads the member', () => {
    const text = '{ "type" : "tensor" ,\n\t"input" : { "x" : [ 1.50, 2e0, -0.25, -0 ] } }';
    expect(memberJson(text, 'input')).toEqual({ json: '{ "x" : [ 1.50, 2e0, -0.25, -0 ] }', members: 1 });
    expect(memberJson(text, 'type')).toEqual({ json: '"tensor"', members: null });
    expect(memberJson('{"a":1,"b":true,"c":null}', 'b')?.json).toBe('true');
    expect(memberJson('{"a":1,"b":-12.5e3}', 'b')?.json).toBe('-12.5e3');
    expect(memberJson('{"a":"}]\\"{[","input":{"p":"a \\\\"}}', 'input')?.json).toBe('{"p":"a \\\\"}');
    expect(memberJson('{"input":[1,{"a":1}]}', 'input')).toEqual({ json: '[1,{"a":1}]', members: null });
  });

  it('agrees with JSON.parse for random documents, however they are spaced', () => {
    const random = seeded(30);
    for (let run = 0; run < 2000; run++) {
      const document = { before: randomValue(random, 0), input: randomValue(random, 0), after: randomValue(random, 0) };
      const text = spaced(document, SPACINGS[run % SPACINGS.length]!);
      const cut = memberJson(text, 'input');
      expect(cut, text).not.toBeNull();
      expect(JSON.parse(cut!.json), text).toEqual(JSON.parse(text).input);
      expect(cut!.json.trim()).toBe(cut!.json);
      const input = document.input;
      expect(cut!.members, text).toBe(input !== null && typeof input === 'object' && !Array.isArray(input) ? Object.keys(input).length : null);
    }
  });

  it('counts the members an object\'s text names, a name given twice twice, whatever its values hold', () => {
    expect(memberJson('{"input":{"x":[1],"x":[2]}}', 'input')?.members).toBe(2);
    expect(memberJson('{"input":{ "a" : "x:y" , "b" : { "c" : "d" }, "e": ["f:"] }}', 'input')?.members).toBe(3);
    expect(memberJson('{"input":{}}', 'input')?.members).toBe(0);
  });

  it('answers null where a reader could see another member or none', () => {
    // JSON.parse keeps the last of two; another reader the first.
    expect(memberJson('{"input":{"x":[1]},"input":{"x":[2]}}', 'input')).toBeNull();
    // `\u0069nput` is `input` to JSON.parse.
    expect(memberJson('{"\\u0069nput":{"x":[1]}}', 'input')).toBeNull();
    expect(memberJson('{"input":{"x":[1]},"\\u0069nput":{"x":[2]}}', 'input')).toBeNull();
    expect(memberJson('{"type":"tensor"}', 'input')).toBeNull();
    expect(memberJson('[{"input":1}]', 'input')).toBeNull();
    expect(memberJson('"input"', 'input')).toBeNull();
    expect(memberJson('{}', 'input')).toBeNull();
    // A nested member of that name is not the document's.
    expect(memberJson('{"outer":{"input":1}}', 'input')).toBeNull();
  });

  it('answers null, at once, for text that ends before its strings or brackets close', () => {
    for (const text of ['{"input":{"x":[1,2', '{"input":"abc', '{"inp', '{"input":{"a":"}"', '{"a":"\\"}']) expect(memberJson(text, 'input'), text).toBeNull();
    // Any prefix of a document: an answer or none, never an exception or a loop.
    const random = seeded(7);
    for (let run = 0; run < 300; run++) {
      const text = spaced({ input: randomValue(random, 0), after: randomValue(random, 0) }, SPACINGS[run % SPACINGS.length]!);
      for (let end = 0; end < text.length; end += 1 + Math.floor(random() * 5)) expect(() => memberJson(text.slice(0, end), 'input')).not.toThrow();
    }
  });
});
