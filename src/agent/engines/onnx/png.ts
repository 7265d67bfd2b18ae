import { PNG } from 'pngjs';
import sharp from 'sharp';

/**
 * Up to this many pixels a PNG is encoded on the worker's own thread (pngjs, with Node's zlib): sharp (libvips)
 * costs about 0.6 ms a picture however small it is — a hop to the thread pool and libvips' own threads, which also
 * take cores from the agent and orchestrator of a small host — against 0.04 ms for 8×8 and 0.3 ms for 64×64
 * in-thread. From about 128×128 libvips is the faster (192×192: 1.8 against 2.8 ms; 256×256: 4.2 against 5.1).
 * Not fast-png: its pure-JS deflate allocates about 200 KB of typed arrays a picture, and the worker's garbage
 * collections every 65 pictures showed as the mesh's latency tail.
 */
const IN_THREAD_PNG_PIXELS = 128 * 128;

/** A PNG of `rgb` (8-bit RGB, row by row); `inThreadPixels` moves the line between the two encoders (tests). */
export async function encodePng(rgb: Uint8Array, width: number, height: number, inThreadPixels = IN_THREAD_PNG_PIXELS): Promise<Uint8Array> {
  if (width * height <= inThreadPixels) {
    // sync.write reads only the width, the height and the pixels: no PNG stream object is needed.
    return PNG.sync.write({ width, height, data: Buffer.from(rgb.buffer, rgb.byteOffset, rgb.byteLength) } as PNG, { colorType: 2, inputColorType: 2, inputHasAlpha: false });
  }
  return sharp(rgb, { raw: { width, height, channels: 3 } }).png().toBuffer();
}
