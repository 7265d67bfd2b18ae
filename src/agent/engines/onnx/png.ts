import { encode as encodePngInThread } from 'fast-png';
import sharp from 'sharp';

/**
 * Up to this many pixels a PNG is encoded on the worker's own thread (fast-png): sharp (libvips) costs about
 * 0.6 ms a picture however small it is — a hop to the thread pool and libvips' own threads, which also take cores
 * from the agent and orchestrator of a small host — against 0.05 ms for 8×8 and 0.2 ms for 64×64 in-thread.
 * From about 128×128 libvips is the faster (256×256: 1.9 against 2.4 ms; 512×512: 6.4 against 9.6).
 */
export const IN_THREAD_PNG_PIXELS = 128 * 128;

/** A PNG of `rgb` (8-bit RGB, row by row); `inThreadPixels` moves the line between the two encoders (tests). */
export async function encodePng(rgb: Uint8Array, width: number, height: number, inThreadPixels = IN_THREAD_PNG_PIXELS): Promise<Uint8Array> {
  if (width * height <= inThreadPixels) return encodePngInThread({ width, height, data: rgb, channels: 3, depth: 8 });
  return sharp(rgb, { raw: { width, height, channels: 3 } }).png().toBuffer();
}
