import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LogTail } from '../../../src/agent/governance/index.js';

describe('the bounded log tail', () => {
  it('keeps the last lines, across chunk boundaries and both streams', () => {
    const tail = new LogTail({ lines: 3, bytes: 1024 });
    tail.write('out', Buffer.from('one\ntw'));
    tail.write('err', Buffer.from('err line\r\n'));
    tail.write('out', Buffer.from('o\nthree\nfour\npartial'));
    expect(tail.lines()).toEqual(['two', 'three', 'four']);
    tail.flush();
    expect(tail.lines()).toEqual(['three', 'four', 'partial']);
    expect(tail.lines(1)).toEqual(['partial']);
  });

  it('bounds bytes and the length of one line', () => {
    const tail = new LogTail({ lines: 100, bytes: 64 }, 16);
    tail.write('out', Buffer.from(`${'x'.repeat(1000)}\n`));
    // The one line is longer than the whole tail: its end is kept, marked as cut at the front, and shortened to a line's limit.
    expect(tail.lines()).toEqual([`… ${'x'.repeat(12)} …`]);
    for (let i = 0; i < 20; i++) tail.write('out', Buffer.from(`line ${i}\n`));
    const kept = tail.lines();
    expect(kept.at(-1)).toBe('line 19');
    expect(kept.join('').length).toBeLessThanOrEqual(64);
  });

  it('cuts lines between characters, never inside one', () => {
    // Found by the byte-limit property: a ring of 13 bytes starting inside "é", then shortened inside it again.
    const tail = new LogTail({ lines: 1000, bytes: 13 }, 100_000);
    tail.write('err', Buffer.from('x'.repeat(30)));
    tail.write('err', Buffer.from('adéf\r\n\r\n\n\n'));
    const [first, ...rest] = tail.lines();
    expect(first).not.toContain('\uFFFD');
    expect(first).toBe('… adéf');
    expect(rest).toEqual(['', '', '']);
    const partial = new LogTail({ lines: 10, bytes: 64 }, 5);
    partial.write('out', Buffer.from('abcdé'));
    partial.write('out', Buffer.from('z\n'));
    const [cut] = partial.lines();
    expect(cut).toMatch(/^abcd +…$/);
  });

  it('gives each complete line to a listener while one is set', () => {
    const tail = new LogTail({ lines: 2, bytes: 1024 });
    const seen: string[] = [];
    tail.onLine((line) => seen.push(line));
    tail.write('out', Buffer.from('a\nb\nc\nd\ne'));
    tail.onLine(null);
    tail.write('out', Buffer.from('\nf\n'));
    expect(seen).toEqual(['a', 'b', 'c', 'd']);
    expect(tail.lines()).toEqual(['e', 'f']);
  });

  // What a line-by-line reader would see: lines in the order their newlines arrived, each stream's line held until then.
  const reference = (chunks: [string, string][]): string[] => {
    const pending = new Map<string, string>();
    const lines: string[] = [];
    for (const [stream, chunk] of chunks) {
      const parts = ((pending.get(stream) ?? '') + chunk).split('\n');
      pending.set(stream, parts.pop()!);
      lines.push(...parts.map((line) => (line.endsWith('\r') ? line.slice(0, -1) : line)));
    }
    return lines;
  };
  const output = fc.array(fc.tuple(fc.constantFrom('out', 'err'),
    fc.array(fc.constantFrom('a', 'bc', '\n', '\n\n', 'déf', '\r\n', 'x'.repeat(30)), { maxLength: 60 }).map((parts) => parts.join(''))), { maxLength: 12 });

  it('keeps exactly the last lines a line-by-line reader would, and tells a listener every line (property)', () => {
    fc.assert(fc.property(output, fc.integer({ min: 1, max: 5 }), (chunks, lines) => {
      const tail = new LogTail({ lines, bytes: 100_000 }, 100_000);
      const heard: string[] = [];
      tail.onLine((line) => heard.push(line));
      for (const [stream, chunk] of chunks) tail.write(stream, Buffer.from(chunk));
      const expected = reference(chunks);
      expect(heard).toEqual(expected);
      expect(tail.lines()).toEqual(expected.slice(-lines));
    }));
  });

  it('under a byte limit, keeps a suffix of those lines within the limit (property)', () => {
    fc.assert(fc.property(output, fc.integer({ min: 8, max: 200 }), (chunks, bytes) => {
      const tail = new LogTail({ lines: 1000, bytes }, 100_000);
      for (const [stream, chunk] of chunks) tail.write(stream, Buffer.from(chunk));
      const kept = tail.lines();
      const expected = reference(chunks);
      // The limit is on the bytes kept; the marker and a character cut in two (U+FFFD) may add a few.
      expect(Buffer.byteLength(kept.join('\n'))).toBeLessThanOrEqual(bytes + 8);
      if (kept.length === 0) return;
      const [first, ...rest] = kept;
      expect(rest).toEqual(expected.slice(expected.length - rest.length));
      const whole = expected[expected.length - kept.length]!;
      // The oldest kept line is whole, or a fragment of a line cut at the front, marked as such.
      if (first !== whole) expect(first!.startsWith('… ')).toBe(true);
    }));
  });

  it('reads a flood at memory speed: no allocation per chunk', () => {
    const line = 'flood flood flood flood flood flood flood flood flood flood flood flood flood flood flood\n';
    const chunk = Buffer.from(line.repeat(Math.ceil(65536 / line.length)));
    const tail = new LogTail({ lines: 200, bytes: 64 * 1024 });
    const started = performance.now();
    for (let i = 0; i < 2000; i++) tail.write('out', chunk);
    const microsPerChunk = ((performance.now() - started) / 2000) * 1000;
    console.log(`log tail: ${microsPerChunk.toFixed(1)} µs per 64 KiB chunk`);
    expect(tail.lines()).toHaveLength(200);
    expect(microsPerChunk).toBeLessThan(500);
  });
});
