import { Readable } from 'node:stream';
import sharp from 'sharp';
import { LIMITS, MeshError } from '../../../protocol/index.js';
import type { ClientBlobs, Incoming } from '../../blobs/client-blobs.js';
import { judgedStart, type CarriedPicture, type PictureStart } from '../image-jobs.js';

/**
 * img2img's pictures — base64 in the JSON body, or data: URLs as some clients send them — made the start of the mesh's
 * image-to-image the way an OpenAI edit's are: each hashed into a file in hand, decoded under the limits (IMAGE_REFUSED
 * naming `init_images[0]` or `mask`), and stored only once the jobs are admitted. A1111 also fetches http(s) URLs; the
 * mesh does not (it would reach whatever the orchestrator can).
 */
export interface CarriedStart {
  start: PictureStart;
  /** Remove the files in hand (nothing once they are stored): call when the request is done, however it ended. */
  discard(): Promise<void>;
}

/** A picture's bytes and the media type a data: URL declares, from the text a client sent. */
function decoded(text: string, label: string): { bytes: Buffer; mediaType?: string } {
  if (/^https?:\/\//i.test(text)) throw new MeshError('IMAGE_REFUSED', { detail: `${label}: the mesh fetches no URLs; send the picture itself, base64` });
  const dataUrl = /^data:([^;,]*)(?:;[^,]*)?,/i.exec(text);
  const payload = (dataUrl ? text.slice(dataUrl[0].length) : text).replace(/\s+/g, '');
  if (payload === '' || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(payload)) throw new MeshError('IMAGE_REFUSED', { detail: `${label}: not base64 (nor a data: URL of it)` });
  const mediaType = dataUrl?.[1]?.toLowerCase();
  return { bytes: Buffer.from(payload, payload.includes('-') || payload.includes('_') ? 'base64url' : 'base64'), ...(mediaType ? { mediaType } : {}) };
}

/**
 * A1111's mask as the mesh's: A1111 repaints where its mask is white (black with `inpainting_mask_invert`), or, when
 * the mask has transparency, where it is opaque; the mesh repaints where its mask is transparent (OpenAI's convention,
 * what every engine reads). So the repaint channel, negated, becomes the alpha of a grey PNG. Called only on a mask
 * already judged (decoded under the pixel limit).
 */
async function meshMask(path: string, invert: boolean): Promise<Buffer> {
  const source = sharp(path, { limitInputPixels: LIMITS.inputImage.maxPixels });
  const { isOpaque } = await source.stats();
  const repaint = isOpaque ? sharp(path).flatten({ background: '#000000' }).greyscale() : sharp(path).ensureAlpha().extractChannel('alpha');
  const { data, info } = await (invert ? repaint : repaint.negate({ alpha: false })).raw().toBuffer({ resolveWithObject: true });
  const raw = { width: info.width, height: info.height, channels: 1 as const };
  return sharp(data, { raw }).joinChannel(data, { raw }).png().toBuffer();
}

/** img2img's start: its picture and optional mask, judged, carried until the jobs are admitted. */
export async function carriedStart(clientBlobs: ClientBlobs, grantId: string, image: string, mask: string | undefined, maskInvert: boolean): Promise<CarriedStart> {
  const held: Incoming[] = [];
  const discard = async (): Promise<void> => {
    await Promise.all(held.map((incoming) => clientBlobs.discard(incoming)));
  };
  const receive = async (bytes: Buffer): Promise<Incoming> => {
    const incoming = await clientBlobs.receive(Readable.from([bytes]));
    held.push(incoming);
    return incoming;
  };
  try {
    const picture = decoded(image, 'init_images[0]');
    const pictures: CarriedPicture[] = [{
      field: 'image', label: 'init_images[0]', incoming: await receive(picture.bytes), declared: picture.mediaType ? { mediaType: picture.mediaType } : {},
    }];
    if (mask !== undefined) {
      const sent = decoded(mask, 'mask');
      const original: CarriedPicture = { field: 'mask', label: 'mask', incoming: await receive(sent.bytes), declared: sent.mediaType ? { mediaType: sent.mediaType } : {} };
      // Judged as sent before it is decoded to be converted; the converted mask is what the jobs take.
      await judgedStart(clientBlobs, grantId, [pictures[0]!, original]);
      pictures.push({ field: 'mask', label: 'mask', incoming: await receive(await meshMask(original.incoming.path, maskInvert)), declared: { mediaType: 'image/png' } });
    }
    return { start: await judgedStart(clientBlobs, grantId, pictures), discard };
  } catch (error) {
    await discard();
    throw error;
  }
}
