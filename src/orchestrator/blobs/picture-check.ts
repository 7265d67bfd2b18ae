import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { fileTypeFromFile } from 'file-type';
import sharp from 'sharp';
import { LIMITS } from '../../protocol/index.js';
import type { ImageVerdict } from '../store/index.js';

// Pictures judged here are decoded once and never again (the verdict is kept by digest): libvips's operation cache
// would only hold up to 50 MB of their pixels, and keep their files open after they were deleted or renamed.
sharp.cache(false);

/** The media type each decoded format has, and the file name extensions that claim it. */
const FORMATS = {
  png: { mime: 'image/png', extensions: ['png'] },
  jpeg: { mime: 'image/jpeg', extensions: ['jpg', 'jpeg', 'jfif'] },
  webp: { mime: 'image/webp', extensions: ['webp'] },
} as const satisfies Record<(typeof LIMITS.inputImage.formats)[number], { mime: string; extensions: readonly string[] }>;
type Format = keyof typeof FORMATS;

/** What the client said the file is: a `Content-Type`, a file name. Either must agree with the bytes when given. */
export interface DeclaredType {
  mediaType?: string;
  filename?: string;
}

/** Bytes read at a time while walking a file's structure: memory stays at this much whatever the file's size. */
const BLOCK_BYTES = 1024 * 1024;

const refused = (refusal: string): ImageVerdict => ({ ok: false, refusal });

/**
 * Whether the file at `path` is a picture a job may start from: PNG, JPEG or WebP by its signature (never by what
 * the client declared, which must agree), with nothing after the format's own end (a PNG that is also a ZIP, an HTML
 * page after a JPEG's end marker), at most `maxPixels` by its header, and decoded to the last row (a truncated file
 * fails). Read from disk, never whole into memory: the signature and the header first, the structure walked a block
 * at a time, and the decode streamed into statistics (libvips keeps a few rows, not the picture) and bounded by
 * `maxPixels` — a file of any size costs a few megabytes here.
 */
export async function checkPicture(path: string, maxPixels: number = LIMITS.inputImage.maxPixels): Promise<ImageVerdict> {
  const sniffed = await fileTypeFromFile(path);
  const format = (Object.keys(FORMATS) as Format[]).find((name) => FORMATS[name].mime === sniffed?.mime);
  if (!format) return refused(`its bytes are ${sniffed ? sniffed.mime : 'no known file type'}; pictures must be PNG, JPEG or WebP`);
  const trailing = await bytesAfterEnd(format, path);
  if (trailing > 0) return refused(`${trailing} bytes follow the end of the ${format.toUpperCase()} data (a file that is also something else is not taken)`);
  try {
    // The header alone: a bomb is refused by its declared size before a pixel is decoded.
    const meta = await sharp(path, { limitInputPixels: false }).metadata();
    const width = meta.width ?? 0;
    const height = meta.height ?? 0;
    if (width * height > maxPixels) return refused(`${width}×${height} is ${width * height} pixels; the limit is ${maxPixels}`);
    // The whole picture, decoded row by row into a sink: a truncated or corrupt one fails here instead of in an engine.
    await sharp(path, { limitInputPixels: maxPixels, failOn: 'truncated', sequentialRead: true }).stats();
    return { ok: true, format, width, height };
  } catch (error) {
    return refused(`the ${format.toUpperCase()} data does not decode (${error instanceof Error ? error.message : String(error)})`);
  }
}

/** Why what the client declared disagrees with a picture's format (by its bytes), or null when it agrees or says nothing. */
export function declaredMismatch(format: string, declared: DeclaredType): string | null {
  if (!Object.hasOwn(FORMATS, format)) return null;
  return mismatchOf(format as Format, declared);
}

function mismatchOf(format: Format, declared: DeclaredType): string | null {
  const mediaType = declared.mediaType?.split(';')[0]!.trim().toLowerCase();
  // A generic type says nothing about the picture; an image type must be this one.
  if (mediaType && mediaType.startsWith('image/') && mediaType !== FORMATS[format].mime && !(format === 'jpeg' && mediaType === 'image/jpg')) {
    return `it was sent as ${mediaType} but its bytes are ${FORMATS[format].mime}`;
  }
  const extension = declared.filename?.match(/\.([a-z0-9]+)$/i)?.[1]?.toLowerCase();
  const known = extension !== undefined && Object.values(FORMATS).some((entry) => (entry.extensions as readonly string[]).includes(extension));
  if (known && !(FORMATS[format].extensions as readonly string[]).includes(extension)) {
    return `its name ends in .${extension} but its bytes are ${FORMATS[format].mime}`;
  }
  return null;
}

/** How many bytes of the file follow the end of the picture's own data (0 when none, or when the format cannot say). */
async function bytesAfterEnd(format: Format, path: string): Promise<number> {
  const { size } = await stat(path);
  if (format === 'png') {
    const end = await pngEnd(path, size);
    return end === null ? 0 : Math.max(0, size - end); // no IEND: truncated, which decoding reports
  }
  if (format === 'webp') {
    // RIFF: the size after the first 8 bytes, padded to even.
    const riff = await head(path, 8);
    if (riff.length < 8) return 0;
    const length = riff.readUInt32LE(4) + 8;
    return Math.max(0, size - (length + (length % 2)));
  }
  return jpegTrailing(path, size);
}

/** The first `count` bytes of a file (fewer if it is shorter). */
async function head(path: string, count: number): Promise<Buffer> {
  const file = await open(path, 'r');
  try {
    const buffer = Buffer.alloc(count);
    const { bytesRead } = await file.read(buffer, 0, count, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await file.close();
  }
}

/**
 * Where a PNG's data ends: the offset just past IEND's CRC, walking the chunks after the 8-byte signature (length,
 * type, data, CRC) a block at a time; null when the file ends first. A chunk whose header is in the file's last 12
 * bytes is not read (no room for its CRC).
 */
async function pngEnd(path: string, size: number): Promise<number | null> {
  let next = 8;
  let read = 0;
  let carry: Buffer = Buffer.alloc(0);
  for await (const block of createReadStream(path, { highWaterMark: BLOCK_BYTES }) as AsyncIterable<Buffer>) {
    const data = carry.length > 0 ? Buffer.concat([carry, block]) : block;
    const base = read - carry.length;
    read += block.length;
    while (next + 8 <= base + data.length && next + 12 <= size) {
      const at = next - base;
      const length = data.readUInt32BE(at);
      const type = data.toString('latin1', at + 4, at + 8);
      next += 12 + length;
      if (type === 'IEND') return next;
    }
    // A header cut by the block's end is read with the next block; a chunk's data is skipped without reading it.
    carry = next < base + data.length ? data.subarray(next - base) : Buffer.alloc(0);
  }
  return null;
}

/**
 * A JPEG's bytes after its end: none when its last marker is the end of image (0xFFD9), zero padding after it aside;
 * otherwise those after the last end-of-image marker (0 when there is none: truncated, which decoding reports).
 * Streamed: the last marker and the last non-zero byte are tracked block by block.
 */
async function jpegTrailing(path: string, size: number): Promise<number> {
  const END = Buffer.from([0xff, 0xd9]);
  let read = 0;
  let lastMarkerEnd = -1;
  let lastNonZeroEnd = 0;
  let previousLast = -1;
  for await (const block of createReadStream(path, { highWaterMark: BLOCK_BYTES }) as AsyncIterable<Buffer>) {
    if (previousLast === 0xff && block[0] === 0xd9) lastMarkerEnd = read + 1;
    const marker = block.lastIndexOf(END);
    if (marker >= 0) lastMarkerEnd = read + marker + 2;
    let end = block.length;
    while (end > 0 && block[end - 1] === 0) end--;
    if (end > 0) lastNonZeroEnd = read + end;
    previousLast = block[block.length - 1] ?? -1;
    read += block.length;
  }
  // Nothing but zeros after the last marker: the picture ends there (the marker's 0xD9 is the last non-zero byte).
  if (lastMarkerEnd === lastNonZeroEnd) return 0;
  return lastMarkerEnd < 0 ? 0 : size - lastMarkerEnd;
}
