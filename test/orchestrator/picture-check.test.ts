import { describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { checkPicture, declaredMismatch } from '../../src/orchestrator/blobs/picture-check.js';

/** Whether bytes are a picture a job may start from, case by case (the mesh-level refusals are in image-inputs.test.ts). */
const noise = () => sharp({ create: { width: 40, height: 30, channels: 3, background: '#777', noise: { type: 'gaussian', mean: 128, sigma: 30 } } });

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
