import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import OpenAI, { PermissionDeniedError, BadRequestError, RateLimitError, toFile } from 'openai';
import sharp from 'sharp';
import { removeDir, startMesh, type RunningMesh } from '../helpers/mesh.js';
import { blobDirEntries, blobEntry } from '../helpers/blob-dir.js';
import { comparedHalves } from '../helpers/pixels.js';

/**
 * OpenAI's images API on the mesh, driven by the official `openai` npm client as a user's script would drive it
 * (`baseURL` at the mesh's `/openai/v1`, a gpumesh grant as the API key), against a real `gpumesh up` and its agent:
 * generations as URLs and as base64, n = 4 in one fused batch, an edit of an uploaded picture with a mask, a stream
 * with real partial images of the refinement, the models list, and refusals as the client's own error classes.
 */
let mesh: RunningMesh;
let client: OpenAI;
let key: string;

async function mint(body: Record<string, unknown>): Promise<string> {
  const response = await fetch(`${mesh.url}/v1/grants`, {
    method: 'POST', headers: { authorization: `Bearer ${mesh.admin}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  expect(response.status).toBe(201);
  return ((await response.json()) as { token: string }).token;
}

beforeAll(async () => {
  mesh = await startMesh();
  key = await mint({ kind: 'client', types: ['image'] });
  client = new OpenAI({ apiKey: key, baseURL: `${mesh.url}/openai/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
});

const pictureOf = async (b64: string) => sharp(Buffer.from(b64, 'base64')).metadata();

describe('images.generate with the openai client', () => {
  it('answers a URL that works without a header, for an hour, and read-only', async () => {
    const answer = await client.images.generate({ prompt: 'a lighthouse at dusk', model: 'dall-e-2', size: '256x256', response_format: 'url' });
    expect(answer.data).toHaveLength(1);
    const url = answer.data![0]!.url!;
    expect(url).toMatch(new RegExp(`^${mesh.url}/v1/blobs/sha256:[0-9a-f]{64}\\?access_token=`));
    const picture = await fetch(url);
    expect(picture.status).toBe(200);
    expect(picture.headers.get('content-type')).toBe('image/png');
    expect(await sharp(Buffer.from(await picture.arrayBuffer())).metadata()).toMatchObject({ width: 256, height: 256, format: 'png' });
    // The URL's grant reads blobs and nothing else.
    const token = new URL(url).searchParams.get('access_token')!;
    const submit = await fetch(`${mesh.url}/v1/jobs`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ type: 'image', input: { prompt: 'x' } }) });
    expect(submit.status).toBe(403);
  });

  it('n = 4 as base64: four different pictures made in one fused batch; jpeg on request', async () => {
    const answer = await client.images.generate({ prompt: 'four foxes', n: 4, size: '128x128', response_format: 'b64_json', output_format: 'jpeg' });
    expect(answer.data).toHaveLength(4);
    expect(answer).toMatchObject({ output_format: 'jpeg', size: '128x128' });
    const pictures = answer.data!.map((entry) => entry.b64_json!);
    expect(new Set(pictures).size).toBe(4);
    for (const b64 of pictures) expect(await pictureOf(b64)).toMatchObject({ format: 'jpeg', width: 128, height: 128 });
    const listed = await fetch(`${mesh.url}/v1/jobs?limit=4`, { headers: { authorization: `Bearer ${mesh.admin}` } });
    const jobs = ((await listed.json()) as { jobs: { input: { prompt: string }; attempts: { batchId: string; batchSize: number }[] }[] }).jobs;
    expect(jobs.every((job) => job.input.prompt === 'four foxes')).toBe(true);
    expect(new Set(jobs.map((job) => job.attempts[0]!.batchId)).size).toBe(1);
    expect(jobs[0]!.attempts[0]!.batchSize).toBe(4);
  });

  it('stream: true with partial_images streams real previews of the refinement, then the picture', async () => {
    const stream = await client.images.generate({ prompt: 'a stormy sea', size: '128x128', stream: true, partial_images: 2 });
    const events: { type: string; b64_json: string; partial_image_index?: number }[] = [];
    for await (const event of stream) events.push(event as never);
    expect(events.map((event) => event.type)).toEqual(['image_generation.partial_image', 'image_generation.partial_image', 'image_generation.completed']);
    expect(events.map((event) => event.partial_image_index)).toEqual([0, 1, undefined]);
    const [first, second, done] = events.map((event) => Buffer.from(event.b64_json, 'base64'));
    for (const png of [first!, second!, done!]) expect(await sharp(png).metadata()).toMatchObject({ format: 'png', width: 128, height: 128 });
    // Previews are the refinement on its way: different from each other and from the final picture.
    expect(first!.equals(second!)).toBe(false);
    expect(second!.equals(done!)).toBe(false);
  });

  it('lists the models the key may use', async () => {
    const ids = [];
    for await (const model of client.models.list()) ids.push(model.id);
    expect(ids).toContain('gen');
  });

  it('refusals arrive as the client’s own errors, in OpenAI’s shape', async () => {
    const videoOnly = new OpenAI({ apiKey: await mint({ kind: 'client', types: ['video'] }), baseURL: `${mesh.url}/openai/v1`, maxRetries: 0 });
    const denied = await videoOnly.images.generate({ prompt: 'not for me' }).catch((error: unknown) => error);
    expect(denied).toBeInstanceOf(PermissionDeniedError);
    expect((denied as PermissionDeniedError).type).toBe('permission_error');

    const tooBig = await client.images.generate({ prompt: 'huge', size: '1536x1024' }).catch((error: unknown) => error);
    expect(tooBig).toBeInstanceOf(BadRequestError);
    expect((tooBig as BadRequestError).param).toBe('size');
    expect((tooBig as BadRequestError).message).toContain('each side from 8 to 1024');

    const badKey = new OpenAI({ apiKey: 'not-a-grant', baseURL: `${mesh.url}/openai/v1`, maxRetries: 0 });
    expect(await badKey.images.generate({ prompt: 'x' }).catch((error: unknown) => (error as { status: number }).status)).toBe(401);
  });
});

describe('images.edit with the openai client', () => {
  it('edits an uploaded picture (image-to-image, the mask’s transparent half repainted), and refuses a file that is not a picture', async () => {
    const svg = '<svg xmlns="http://www.w3.org/2000/svg" width="96" height="64"><rect width="96" height="64" fill="#3060c0"/><circle cx="48" cy="32" r="18" fill="#e0d0a0"/></svg>';
    const png = await sharp(Buffer.from(svg)).png().toBuffer();
    const mask = await sharp(Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="96" height="64"><rect width="48" height="64" fill="#000"/></svg>')).ensureAlpha().png().toBuffer();
    const answer = await client.images.edit({
      image: await toFile(png, 'photo.png', { type: 'image/png' }), mask: await toFile(mask, 'mask.png', { type: 'image/png' }),
      prompt: 'the same scene at night', response_format: 'b64_json',
    });
    const edited = Buffer.from(answer.data![0]!.b64_json!, 'base64');
    expect(await sharp(edited).metadata()).toMatchObject({ width: 96, height: 64 });
    const { left, right } = await comparedHalves(png, edited, 48);
    expect(left.same).toBe(48 * 64);
    expect(right.changed).toBeGreaterThan(48 * 64 * 0.5);

    const notPicture = await client.images.edit({ image: await toFile(Buffer.from('%PDF-1.4 not a picture'), 'photo.png', { type: 'image/png' }), prompt: 'x' }).catch((error: unknown) => error);
    expect(notPicture).toBeInstanceOf(BadRequestError);
    expect((notPicture as BadRequestError).code).toBe('IMAGE_REFUSED');
    expect((notPicture as BadRequestError).param).toBe('image');
  });

  it('streams an edit (image[] of one picture, partial_images 1) as image_edit events, and refuses two pictures naming the field', async () => {
    const png = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#c04030' } }).png().toBuffer();
    // An array of files: the client sends them as image[] parts, as OpenAI's multi-picture edit does.
    const stream = await client.images.edit({ image: [await toFile(png, 'one.png', { type: 'image/png' })], prompt: 'the same in blue', stream: true, partial_images: 1 });
    const events: { type: string; b64_json: string; partial_image_index?: number }[] = [];
    for await (const event of stream) events.push(event as never);
    expect(events.map((event) => event.type)).toEqual(['image_edit.partial_image', 'image_edit.completed']);
    expect(events[0]!.partial_image_index).toBe(0);
    for (const event of events) expect(await sharp(Buffer.from(event.b64_json, 'base64')).metadata()).toMatchObject({ format: 'png', width: 64, height: 64 });

    const two = await client.images.edit({
      image: [await toFile(png, 'one.png', { type: 'image/png' }), await toFile(png, 'two.png', { type: 'image/png' })], prompt: 'x',
    }).catch((error: unknown) => error);
    expect(two).toBeInstanceOf(BadRequestError);
    expect((two as BadRequestError).param).toBe('image');
    expect((two as BadRequestError).message).toContain('2 pictures');
  });
});

describe('a refused request leaves nothing behind', () => {
  /** A small PNG of one colour, one the mesh has not seen: storing it would add a blob. */
  const png = (colour: string) => sharp({ create: { width: 32, height: 32, channels: 3, background: colour } }).png().toBuffer();
  const file = async (bytes: Buffer, name = 'photo.png') => toFile(bytes, name, { type: 'image/png' });
  const digestOf = (bytes: Buffer): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

  it('an edit refused for any reason — two pictures, a bad mask, a bad size, an unknown model, a grant that may not, a rate — stores none of its pictures', async () => {
    const videoOnly = new OpenAI({ apiKey: await mint({ kind: 'client', types: ['video'] }), baseURL: `${mesh.url}/openai/v1`, maxRetries: 0 });
    const twoPerMinute = new OpenAI({ apiKey: await mint({ kind: 'client', types: ['image'], rate: '2/m' }), baseURL: `${mesh.url}/openai/v1`, maxRetries: 0 });
    const before = blobDirEntries(mesh.data);
    const cases: [string, () => Promise<unknown>, new (...args: never[]) => Error, Record<string, unknown>][] = [
      ['two pictures', async () => client.images.edit({ image: [await file(await png('#101010')), await file(await png('#202020'))], prompt: 'x' }),
        BadRequestError, { param: 'image', message: expect.stringContaining('2 pictures; gpumesh\'s image-to-image starts from one') }],
      ['a mask that is no picture', async () => client.images.edit({ image: await file(await png('#303030')), mask: await file(Buffer.from('%PDF-1.4 not a mask'), 'mask.png'), prompt: 'x' }),
        BadRequestError, { param: 'mask', code: 'IMAGE_REFUSED', message: expect.stringContaining('mask: its bytes are application/pdf') }],
      ['a size beyond the limits', async () => client.images.edit({ image: await file(await png('#404040')), prompt: 'x', size: '4096x4096' as never }),
        BadRequestError, { param: 'size', message: expect.stringContaining('each side from 8 to 1024') }],
      ['an unknown model', async () => client.images.edit({ image: await file(await png('#505050')), prompt: 'x', model: 'no-such-model' }),
        BadRequestError, { code: 'UNKNOWN_MODEL', message: expect.stringContaining('Unknown model "no-such-model"') }],
      ['a grant that may not run it', async () => videoOnly.images.edit({ image: await file(await png('#606060')), prompt: 'x' }),
        PermissionDeniedError, { type: 'permission_error' }],
      ['more pictures than the grant\'s rate allows', async () => twoPerMinute.images.edit({ image: await file(await png('#707070')), prompt: 'x', n: 3 }),
        RateLimitError, { code: 'RATE_LIMITED' }],
    ];
    for (const [what, edit, kind, fields] of cases) {
      const error = await edit().then(() => null, (caught: unknown) => caught);
      expect(error, what).toBeInstanceOf(kind);
      expect(error, what).toMatchObject(fields);
      expect(blobDirEntries(mesh.data), what).toEqual(before);
    }

    // The same grant's two pictures fit its rate: the edit runs, and only then are its picture and mask stored.
    const picture = await png('#808080');
    const mask = await sharp({ create: { width: 32, height: 32, channels: 4, background: { r: 0, g: 0, b: 0, alpha: 0 } } }).png().toBuffer();
    const done = await twoPerMinute.images.edit({ image: await file(picture), mask: await file(mask, 'mask.png'), prompt: 'x', n: 2, response_format: 'b64_json' });
    expect(done.data).toHaveLength(2);
    const after = blobDirEntries(mesh.data);
    expect(after).toContain(blobEntry(digestOf(picture), picture.length));
    expect(after).toContain(blobEntry(digestOf(mask), mask.length));
  });

  it('n pictures refused together write no job at all (not jobs admitted, then cancelled)', async () => {
    const jobs = async (): Promise<string[]> => {
      const listed = await fetch(`${mesh.url}/v1/jobs?limit=50`, { headers: { authorization: `Bearer ${mesh.admin}` } });
      return ((await listed.json()) as { jobs: { id: string }[] }).jobs.map((job) => job.id);
    };
    const onePerMinute = new OpenAI({ apiKey: await mint({ kind: 'client', types: ['image'], rate: '1/m' }), baseURL: `${mesh.url}/openai/v1`, maxRetries: 0 });
    const before = await jobs();
    const refused = await onePerMinute.images.generate({ prompt: 'three at once', n: 3, size: '64x64' }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RateLimitError);
    expect((refused as RateLimitError).message).toContain('1 job per minute');
    expect(await jobs()).toEqual(before);
  });
});
