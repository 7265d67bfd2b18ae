import { extname } from 'node:path';
import sharp from 'sharp';
import type { OutputFile } from '../../core/engine.js';

const BY_EXTENSION: Record<string, string> = {
  '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.webp': 'image/webp', '.gif': 'image/gif',
  '.bmp': 'image/bmp', '.tif': 'image/tiff', '.tiff': 'image/tiff', '.avif': 'image/avif',
  '.mp4': 'video/mp4', '.webm': 'video/webm', '.mov': 'video/quicktime', '.mkv': 'video/x-matroska',
  '.wav': 'audio/wav', '.mp3': 'audio/mpeg', '.flac': 'audio/flac', '.ogg': 'audio/ogg',
  '.json': 'application/json', '.txt': 'text/plain', '.npy': 'application/octet-stream',
};

const ascii = (bytes: Uint8Array, start: number, text: string): boolean =>
  bytes.length >= start + text.length && [...text].every((char, i) => bytes[start + i] === char.charCodeAt(0));

/** The media type the first bytes announce, or null. */
function sniffMediaType(bytes: Uint8Array): string | null {
  if (bytes[0] === 0x89 && ascii(bytes, 1, 'PNG')) return 'image/png';
  if (bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'image/jpeg';
  if (ascii(bytes, 0, 'GIF8')) return 'image/gif';
  if (ascii(bytes, 0, 'RIFF') && ascii(bytes, 8, 'WEBP')) return 'image/webp';
  if (ascii(bytes, 0, 'RIFF') && ascii(bytes, 8, 'WAVE')) return 'audio/wav';
  if (ascii(bytes, 4, 'ftyp')) return ascii(bytes, 8, 'qt  ') ? 'video/quicktime' : 'video/mp4';
  if (bytes[0] === 0x1a && bytes[1] === 0x45 && bytes[2] === 0xdf && bytes[3] === 0xa3) return 'video/webm';
  if (ascii(bytes, 0, 'fLaC')) return 'audio/flac';
  if (ascii(bytes, 0, 'OggS')) return 'audio/ogg';
  return null;
}

/**
 * A file's media type: the bytes' own signature first (a server may name a
 * file wrongly, never its bytes), then the extension, then a declared type.
 */
function mediaTypeOf(name: string, bytes: Uint8Array, declared?: string | null): string {
  const sniffed = sniffMediaType(bytes);
  if (sniffed) return sniffed;
  const byName = BY_EXTENSION[extname(name).toLowerCase()];
  if (byName) return byName;
  const plain = declared?.split(';')[0]?.trim();
  return plain && plain !== 'application/octet-stream' ? plain : 'application/octet-stream';
}

/** An output file with its media type and, for images, its size in pixels. */
export async function describeOutput(name: string, bytes: Uint8Array, declared?: string | null): Promise<OutputFile> {
  const mediaType = mediaTypeOf(name, bytes, declared);
  if (!mediaType.startsWith('image/')) return { bytes, mediaType };
  try {
    const { width, height } = await sharp(bytes).metadata();
    return { bytes, mediaType, width, height };
  } catch {
    return { bytes, mediaType }; // a truncated or unusual image is still the job's output
  }
}
