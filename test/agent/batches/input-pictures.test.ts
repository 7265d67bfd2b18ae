import { createHash } from 'node:crypto';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { InputPictures } from '../../../src/agent/batches/input-pictures.js';

const digestOf = (bytes: Buffer): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
const png = (width: number, height: number, colour: string): Promise<Buffer> =>
  sharp({ create: { width, height, channels: 3, background: colour } }).png().toBuffer();

/**
 * The orchestrator's blob route as a function (what the agent is given): each picture's bytes by digest, answered
 * only when the test lets it, so the test sees which fetches were asked for before any was answered.
 */
function blobRoute(blobs: Map<string, Buffer>) {
  const asked: string[] = [];
  const waiting: Array<() => void> = [];
  const fetchBlob = async (digest: string): Promise<Response> => {
    asked.push(digest);
    await new Promise<void>((resolve) => waiting.push(resolve));
    const bytes = blobs.get(digest);
    return bytes ? new Response(Uint8Array.from(bytes), { headers: { 'content-length': String(bytes.length) } }) : new Response('no such blob', { status: 404 });
  };
  return { fetchBlob, asked, answerAll: () => waiting.splice(0).forEach((answer) => answer()) };
}

describe('InputPictures', () => {
  it('asks for every picture of a batch at once, fetches a picture two jobs share once, and decodes each for its job', async () => {
    const red = await png(8, 4, '#ff0000');
    const blue = await png(6, 6, '#0000ff');
    const route = blobRoute(new Map([[digestOf(red), red], [digestOf(blue), blue]]));
    const pictures = new InputPictures(route.fetchBlob);
    const jobs = [
      { id: 'a', input: { image: digestOf(red) } },
      { id: 'b', input: { image: digestOf(blue), mask: digestOf(red) } },
      { id: 'c', input: { prompt: 'no picture' } },
    ];
    const pending = pictures.forJobs(jobs)!;
    await new Promise((resolve) => setImmediate(resolve));
    // Both digests were asked for before either answer came back; the red one once, though two fields name it.
    expect(route.asked.sort()).toEqual([digestOf(red), digestOf(blue)].sort());
    route.answerAll();
    const byJob = await pending;
    expect([...byJob.keys()].sort()).toEqual(['a', 'b']);
    expect(byJob.get('a')!.image).toMatchObject({ width: 8, height: 4, channels: 3 });
    expect([...byJob.get('a')!.image!.data.subarray(0, 3)]).toEqual([255, 0, 0]);
    expect(byJob.get('b')!.image).toMatchObject({ width: 6, height: 6, channels: 3 });
    expect(byJob.get('b')!.mask).toMatchObject({ width: 8, height: 4, channels: 1 });
  });

  it('answers null at once for a batch that names no picture', () => {
    const route = blobRoute(new Map());
    expect(new InputPictures(route.fetchBlob).forJobs([{ id: 'a', input: { prompt: 'x' } }])).toBeNull();
    expect(route.asked).toEqual([]);
  });

  it('fails the batch, retryably, naming the picture, when the bytes that arrive are not the digest', async () => {
    const red = await png(4, 4, '#ff0000');
    const claimed = `sha256:${'0'.repeat(64)}`;
    const route = blobRoute(new Map([[claimed, red]]));
    const pending = new InputPictures(route.fetchBlob).forJobs([{ id: 'a', input: { image: claimed } }])!;
    await new Promise((resolve) => setImmediate(resolve));
    route.answerAll();
    await expect(pending).rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: true, message: expect.stringContaining(`the input picture ${claimed} arrived as ${digestOf(red)}`) });
  });

  it('refuses a picture over the pixel limit without decoding it, naming the field and the digest', async () => {
    const large = await png(64, 64, '#00ff00');
    const route = blobRoute(new Map([[digestOf(large), large]]));
    const pending = new InputPictures(route.fetchBlob, { maxPixels: 32 * 32 }).forJobs([{ id: 'a', input: { image: digestOf(large) } }])!;
    await new Promise((resolve) => setImmediate(resolve));
    route.answerAll();
    await expect(pending).rejects.toMatchObject({ code: 'IMAGE_REFUSED', retryable: false, message: expect.stringMatching(new RegExp(`^image ${digestOf(large)}: .*pixel limit`)) });
  });
});
