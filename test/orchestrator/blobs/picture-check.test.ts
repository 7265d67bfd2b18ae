import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { checkPicture as checkFile, declaredMismatch } from '../../../src/orchestrator/blobs/picture-check.js';
import { tempDirsPerTest } from '../../helpers/mesh.js';

/** Whether bytes are a picture a job may start from, case by case (the mesh-level refusals are in image-inputs.test.ts). */
const noise = (width = 40, height = 30) => sharp({ create: { width, height, channels: 3, background: '#777', noise: { type: 'gaussian', mean: 128, sigma: 30 } } });

/** A JPEG made exactly `total` bytes long by comment segments (COM, 0xFFFE) after its start marker. */
function padJpeg(jpeg: Buffer, total: number): Buffer {
  const segments: Buffer[] = [];
  let missing = total - jpeg.length;
  while (missing > 0) {
    // A segment is its marker (2 bytes) and a length that counts itself (2 bytes): 4 bytes at least, 65,537 at most
    // (and never leave fewer than 4 for the last one).
    let size = Math.min(missing, 65_537);
    if (missing - size > 0 && missing - size < 4) size -= 4;
    const segment = Buffer.alloc(size, 0x20);
    segment.writeUInt16BE(0xfffe, 0);
    segment.writeUInt16BE(size - 2, 2);
    segments.push(segment);
    missing -= size;
  }
  return Buffer.concat([jpeg.subarray(0, 2), ...segments, jpeg.subarray(2)]);
}

const tempDir = tempDirsPerTest();
/** Pictures are judged from a file on disk (never whole in memory): each case's bytes are written to one first. */
const checkPicture = (bytes: Uint8Array, maxPixels?: number) => {
  const path = join(tempDir('picture-check-'), 'file');
  writeFileSync(path, bytes);
  return checkFile(path, maxPixels);
};

describe('checkPicture', () => {
  it('takes PNG, JPEG and WebP, with their size', async () => {
    for (const [format, bytes] of [['png', await noise().png().toBuffer()], ['jpeg', await noise().jpeg().toBuffer()], ['webp', await noise().webp().toBuffer()]] as const) {
      expect(await checkPicture(bytes)).toEqual({ ok: true, format, width: 40, height: 30 });
    }
  });

  it('refuses other formats by their bytes, whatever they are named', async () => {
    const gif = await noise().gif().toBuffer();
    expect(await checkPicture(gif)).toMatchObject({ ok: false, refusal: expect.stringContaining('image/gif; pictures must be PNG, JPEG or WebP') });
    expect(await checkPicture(Buffer.from('<svg xmlns="http://www.w3.org/2000/svg"/>'))).toMatchObject({ ok: false });
  });

  it('refuses bytes after the end of a WebP, and a JPEG with a page after its end; zero padding after a JPEG is not a polyglot', async () => {
    const webp = await noise().webp().toBuffer();
    expect(await checkPicture(Buffer.concat([webp, Buffer.from('PK\x03\x04')]))).toMatchObject({ ok: false, refusal: expect.stringContaining('4 bytes follow the end of the WEBP') });
    const jpeg = await noise().jpeg().toBuffer();
    expect(await checkPicture(Buffer.concat([jpeg, Buffer.alloc(16)]))).toMatchObject({ ok: true });
    expect(await checkPicture(Buffer.concat([jpeg, Buffer.from('<script>')]))).toMatchObject({ ok: false });
  });

  it('walks the structure a block at a time: bytes after a PNG\'s end and a JPEG\'s, past the first megabyte and across a block\'s edge', async () => {
    // Over a megabyte of noise: the chunks (and the end marker) cross the 1 MiB blocks the file is read in.
    const png = await noise(700, 600).png({ compressionLevel: 0 }).toBuffer();
    expect(png.length).toBeGreaterThan(1024 * 1024);
    expect(await checkPicture(png)).toEqual({ ok: true, format: 'png', width: 700, height: 600 });
    expect(await checkPicture(Buffer.concat([png, Buffer.from('PK\x03\x04zip')]))).toMatchObject({ ok: false, refusal: expect.stringContaining('7 bytes follow the end of the PNG') });
    const jpeg = await noise(1600, 1200).jpeg({ quality: 100 }).toBuffer();
    expect(jpeg.length).toBeGreaterThan(1024 * 1024);
    expect(await checkPicture(Buffer.concat([jpeg, Buffer.alloc(3 * 1024 * 1024)]))).toMatchObject({ ok: true, format: 'jpeg' });
    expect(await checkPicture(Buffer.concat([jpeg, Buffer.alloc(1024 * 1024 - 1), Buffer.from('<html>')]))).toMatchObject({ ok: false, refusal: expect.stringContaining(`${1024 * 1024 - 1 + 6} bytes follow the end of the JPEG`) });
    // The end marker split by the blocks' edge: its 0xFF ends the first mebibyte, its 0xD9 starts the second.
    const straddling = padJpeg(await noise().jpeg().toBuffer(), 1024 * 1024 + 1);
    expect(straddling.subarray(1024 * 1024 - 1, 1024 * 1024 + 1)).toEqual(Buffer.from([0xff, 0xd9]));
    expect(await checkPicture(straddling)).toMatchObject({ ok: true, format: 'jpeg' });
    expect(await checkPicture(Buffer.concat([straddling, Buffer.from('<x>')]))).toMatchObject({ ok: false, refusal: expect.stringContaining('3 bytes follow the end of the JPEG') });
  });

  it('refuses anything that only starts like a picture, whatever its size, without reading it whole', async () => {
    const signature = (await noise().png().toBuffer()).subarray(0, 33); // the signature and IHDR
    expect(await checkPicture(Buffer.concat([signature, Buffer.alloc(8 * 1024 * 1024, 0x41)]))).toMatchObject({ ok: false });
  });

  it('holds a picture to a lower pixel limit when asked', async () => {
    expect(await checkPicture(await noise().png().toBuffer(), 1000)).toMatchObject({ ok: false, refusal: '40×30 is 1200 pixels; the limit is 1000' });
  });
});

describe('declaredMismatch', () => {
  it('accepts what agrees or says nothing, and names what disagrees', () => {
    expect(declaredMismatch('jpeg', { mediaType: 'image/jpg', filename: 'a.JPEG' })).toBeNull();
    expect(declaredMismatch('png', { mediaType: 'application/octet-stream', filename: 'scan' })).toBeNull();
    expect(declaredMismatch('png', { filename: 'notes.txt' })).toBeNull();
    expect(declaredMismatch('webp', { mediaType: 'image/png; charset=binary' })).toBe('it was sent as image/png but its bytes are image/webp');
    expect(declaredMismatch('png', { filename: 'x.webp' })).toBe('its name ends in .webp but its bytes are image/png');
  });
});
