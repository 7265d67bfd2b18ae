import type { ByteRange } from '../blobs/blob-reader.js';

/**
 * HTTP range requests and validators for immutable, content-addressed
 * bodies (RFC 9110 §13–14), as pure functions of the request headers.
 */

/**
 * What to answer a `Range` header with: the whole body (no header, another unit,
 * an invalid or multi-range header, which a server may ignore), one range (206),
 * or 416 when the range starts past the end.
 */
export type RangeAnswer =
  | { kind: 'whole' }
  | { kind: 'partial'; range: ByteRange }
  | { kind: 'unsatisfiable' };

const WHOLE: RangeAnswer = { kind: 'whole' };
const SPEC = /^(\d*)-(\d*)$/;

/** Read `Range: bytes=a-b | a- | -n` against a body of `size` bytes. */
export function parseRange(header: string | undefined, size: number): RangeAnswer {
  if (header === undefined) return WHOLE;
  const match = /^\s*bytes\s*=\s*(.*)$/i.exec(header);
  if (!match) return WHOLE;
  const specs = match[1]!.split(',').map((spec) => spec.trim());
  // Several ranges would need multipart/byteranges; no client we serve (a <video>, fetch) asks for
  // them, and RFC 9110 lets a server ignore the header and send the whole body instead.
  if (specs.length !== 1) return WHOLE;
  const spec = SPEC.exec(specs[0]!);
  if (!spec) return WHOLE;
  const [, first, last] = spec as unknown as [string, string, string];
  if (first === '') {
    if (last === '') return WHOLE;
    const suffix = Number(last);
    if (suffix === 0 || size === 0) return { kind: 'unsatisfiable' };
    return { kind: 'partial', range: { start: Math.max(0, size - suffix), end: size - 1 } };
  }
  const start = Number(first);
  const end = last === '' ? Infinity : Number(last);
  if (end < start) return WHOLE; // an invalid range-spec: ignore the header
  if (start >= size) return { kind: 'unsatisfiable' };
  return { kind: 'partial', range: { start, end: Math.min(end, size - 1) } };
}

/** `If-None-Match`: `*` or a list of entity tags, compared weakly (a `W/` prefix is ignored). */
export function noneMatch(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}

/**
 * `If-Range`: a range is served only when the validator is our strong ETag.
 * A date never matches (blob responses carry no Last-Modified), and then the
 * client gets the whole body, as the RFC asks.
 */
export function rangeStillApplies(ifRange: string | undefined, etag: string): boolean {
  return ifRange === undefined || ifRange.trim() === etag;
}
