import { describe, expect, it } from 'vitest';
import { noneMatch, parseRange, rangeStillApplies } from '../../../src/orchestrator/http/ranges.js';

describe('parseRange', () => {
  it.each([
    ['bytes=0-99', 1000, { start: 0, end: 99 }],
    ['bytes=500-', 1000, { start: 500, end: 999 }],
    ['bytes=-100', 1000, { start: 900, end: 999 }],
    ['bytes=900-5000', 1000, { start: 900, end: 999 }], // the end is clamped
    ['bytes=-5000', 1000, { start: 0, end: 999 }], // a suffix longer than the body is all of it
    ['bytes=999-999', 1000, { start: 999, end: 999 }],
    ['BYTES = 1-2', 1000, { start: 1, end: 2 }],
  ])('%s of %i bytes → 206 %o', (header, size, range) => {
    expect(parseRange(header, size)).toEqual({ kind: 'partial', range });
  });

  it.each([
    ['bytes=1000-', 1000],
    ['bytes=1000-2000', 1000],
    ['bytes=-0', 1000],
    ['bytes=0-', 0],
    ['bytes=-1', 0],
  ])('%s of %i bytes → 416', (header, size) => {
    expect(parseRange(header, size)).toEqual({ kind: 'unsatisfiable' });
  });

  it.each([
    [undefined],
    ['items=0-1'], // another unit
    ['bytes=5-1'], // last before first: invalid, ignored
    ['bytes=-'],
    ['bytes=a-b'],
    ['bytes=0-1,5-6'], // several ranges: the whole body (documented in docs/api.md)
  ])('%s → the whole body', (header) => {
    expect(parseRange(header, 1000)).toEqual({ kind: 'whole' });
  });
});

describe('validators', () => {
  const etag = '"sha256:abc"';
  it('If-None-Match: a list, weak tags and * match', () => {
    expect(noneMatch(undefined, etag)).toBe(false);
    expect(noneMatch('"other"', etag)).toBe(false);
    expect(noneMatch(`"other", ${etag}`, etag)).toBe(true);
    expect(noneMatch(`W/${etag}`, etag)).toBe(true);
    expect(noneMatch('*', etag)).toBe(true);
  });

  it('If-Range: only our strong ETag keeps the range; another tag or a date means the whole body', () => {
    expect(rangeStillApplies(undefined, etag)).toBe(true);
    expect(rangeStillApplies(etag, etag)).toBe(true);
    expect(rangeStillApplies('"sha256:other"', etag)).toBe(false);
    expect(rangeStillApplies(`W/${etag}`, etag)).toBe(false);
    expect(rangeStillApplies('Wed, 21 Oct 2015 07:28:00 GMT', etag)).toBe(false);
  });
});
