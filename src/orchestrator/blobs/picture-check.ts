import { fileTypeFromBuffer } from 'file-type';
import sharp from 'sharp';
import { LIMITS } from '../../protocol/index.js';
import type { ImageVerdict } from '../store/index.js';

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

const refused = (refusal: string): ImageVerdict => ({ ok: false, refusal });

/**
 * Whether bytes are a picture a job may start from: PNG, JPEG or WebP by their signature (never by what the client
 * declared, which must agree), at most `maxPixels` by the header (sharp refuses a bomb before allocating its pixels),
 * decoded to the last row (a truncated file fails), with nothing after the format's own end (a PNG that is also a
 * ZIP, an HTML page after a JPEG's end marker).
 */
export async function checkPicture(bytes: Uint8Array, maxPixels: number = LIMITS.inputImage.maxPixels): Promise<ImageVerdict> {
  const sniffed = await fileTypeFromBuffer(bytes);
  const format = (Object.keys(FORMATS) as Format[]).find((name) => FORMATS[name].mime === sniffed?.mime);
  if (!format) return refused(`its bytes are ${sniffed ? sniffed.mime : 'no known file type'}; pictures must be PNG, JPEG or WebP`);
  const trailing = bytesAfterEnd(format, bytes);
  if (trailing > 0) return refused(`${trailing} bytes follow the end of the ${format.toUpperCase()} data (a file that is also something else is not taken)`);
  try {
    const meta = await sharp(bytes, { limitInputPixels: false }).metadata();
    const width = meta.width ?? 0;
    const height = meta.height ?? 0;
    if (width * height > maxPixels) return refused(`${width}×${height} is ${width * height} pixels; the limit is ${maxPixels}`);
    // The whole picture, decoded: a truncated or corrupt one fails here instead of in an engine.
    await sharp(bytes, { limitInputPixels: maxPixels, failOn: 'truncated', sequentialRead: true }).raw().toBuffer();
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

/** How many bytes follow the end of the picture's own data (0 when none, or when the format cannot say). */
function bytesAfterEnd(format: Format, bytes: Uint8Array): number {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (format === 'png') {
    // Chunks after the 8-byte signature: length, type, data, CRC; the picture ends with IEND's CRC.
    let offset = 8;
    while (offset + 12 <= view.length) {
      const length = view.readUInt32BE(offset);
      const type = view.toString('latin1', offset + 4, offset + 8);
      offset += 12 + length;
      if (type === 'IEND') return Math.max(0, view.length - offset);
    }
    return 0; // no IEND: truncated, which decoding reports
  }
  if (format === 'webp') {
    // RIFF: the size after the first 8 bytes, padded to even.
    const size = view.readUInt32LE(4) + 8;
    return Math.max(0, view.length - (size + (size % 2)));
  }
  // JPEG: the last marker must be the end of image, followed by nothing (padding zeros aside).
  let end = view.length;
  while (end > 0 && view[end - 1] === 0) end--;
  if (end >= 2 && view[end - 2] === 0xff && view[end - 1] === 0xd9) return 0;
  const marker = view.lastIndexOf(Buffer.from([0xff, 0xd9]));
  return marker < 0 ? 0 : view.length - (marker + 2);
}
