import sharp from 'sharp';

/** Pixels alike and pixels changed, of one part of a picture. */
export interface PixelCount {
  same: number;
  changed: number;
}

/**
 * Two pictures of one size compared pixel by pixel (RGB, alpha left out), left and right of the column `splitX`: how a
 * masked edit's tests tell the part it had to keep from the part it was free to paint.
 */
export async function comparedHalves(beforePicture: Buffer, afterPicture: Buffer, splitX: number): Promise<{ left: PixelCount; right: PixelCount }> {
  const [before, after] = await Promise.all([beforePicture, afterPicture].map((picture) => sharp(picture).removeAlpha().raw().toBuffer({ resolveWithObject: true })));
  const { width, height } = after!.info;
  if (before!.info.width !== width || before!.info.height !== height) throw new Error(`the pictures differ in size: ${before!.info.width}×${before!.info.height} and ${width}×${height}`);
  const left = { same: 0, changed: 0 };
  const right = { same: 0, changed: 0 };
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * 3;
      const same = before!.data[i] === after!.data[i] && before!.data[i + 1] === after!.data[i + 1] && before!.data[i + 2] === after!.data[i + 2];
      const side = x < splitX ? left : right;
      if (same) side.same++;
      else side.changed++;
    }
  }
  return { left, right };
}
