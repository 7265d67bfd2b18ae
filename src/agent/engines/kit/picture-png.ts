import sharp from 'sharp';
import type { InputPicture } from '../../core/engine.js';

/** A decoded picture (RGB, or RGBA for a workflow's, as the agent hands it to an engine) as a PNG, for an engine that passes pictures on as files. */
export function pictureAsPng(picture: InputPicture): Promise<Buffer> {
  const { data, width, height, channels } = picture;
  return sharp(Buffer.from(data.buffer, data.byteOffset, data.byteLength), { raw: { width, height, channels } }).png().toBuffer();
}

/**
 * A decoded mask (its alpha, one channel) as a black PNG with that alpha: the client's own convention (transparent
 * marks what to repaint, OpenAI's), and what ComfyUI's `/upload/mask` reads.
 */
export function maskAsPng(mask: InputPicture): Promise<Buffer> {
  const { data, width, height } = mask;
  return sharp(Buffer.alloc(width * height * 3), { raw: { width, height, channels: 3 } })
    .joinChannel(Buffer.from(data.buffer, data.byteOffset, data.byteLength), { raw: { width, height, channels: 1 } })
    .png().toBuffer();
}
