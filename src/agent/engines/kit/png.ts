import type { OutputFile } from '../../core/engine.js';

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * A PNG from a server's base64 (raw, or a `data:image/png;base64,` URL), checked by its signature
 * and header chunk; width and height come from the header. Throws (with a plain message) on
 * anything that is not a PNG.
 */
export function pngFromBase64(encoded: string): OutputFile & { width: number; height: number } {
  const comma = encoded.startsWith('data:') ? encoded.indexOf(',') : -1;
  const bytes = Buffer.from(comma >= 0 ? encoded.slice(comma + 1) : encoded, 'base64');
  return checkedPng(bytes);
}

export function checkedPng(bytes: Buffer): OutputFile & { width: number; height: number } {
  // Signature (8) + IHDR length (4) + "IHDR" (4) + width (4) + height (4).
  if (bytes.length < 24 || !bytes.subarray(0, 8).equals(SIGNATURE)) {
    // Caught by the server engines that read a server's picture, which fail the job naming the server (ServerError).
    throw new Error(`not a PNG (${bytes.length} bytes starting ${bytes.subarray(0, 8).toString('hex') || 'with nothing'})`);
  }
  if (bytes.toString('latin1', 12, 16) !== 'IHDR') throw new Error('a PNG without its IHDR header chunk');
  const width = bytes.readUInt32BE(16);
  const height = bytes.readUInt32BE(20);
  if (width === 0 || height === 0) throw new Error(`a PNG of ${width}x${height} pixels`);
  return { bytes, mediaType: 'image/png', width, height };
}
