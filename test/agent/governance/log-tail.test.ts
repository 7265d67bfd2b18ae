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
    expect(tail.lines()).toEqual([`${'x'.repeat(16)} …`]);
    for (let i = 0; i < 20; i++) tail.write('out', Buffer.from(`line ${i}\n`));
    const kept = tail.lines();
    expect(kept.at(-1)).toBe('line 19');
    expect(kept.join('').length).toBeLessThanOrEqual(64);
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

  it('skipping the lines a chunk would drop keeps exactly the tail a line-by-line reader keeps (property)', () => {
    const text = fc.array(fc.constantFrom('a', 'bc', '\n', '\n\n', 'déf', '\r\n', 'x'.repeat(30)), { maxLength: 60 }).map((parts) => parts.join(''));
    fc.assert(fc.property(fc.array(fc.tuple(fc.constantFrom('out', 'err'), text), { maxLength: 12 }), fc.integer({ min: 1, max: 5 }), (chunks, lines) => {
      const fast = new LogTail({ lines, bytes: 10_000 });
      const slow = new LogTail({ lines, bytes: 10_000 });
      slow.onLine(() => {}); // a listener forces the line-by-line path
      for (const [stream, chunk] of chunks) {
        fast.write(stream, Buffer.from(chunk));
        slow.write(stream, Buffer.from(chunk));
      }
      fast.flush();
      slow.flush();
      expect(fast.lines()).toEqual(slow.lines());
    }));
  });
});
