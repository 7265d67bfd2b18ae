import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { JOB_INPUTS } from '../../../src/orchestrator/job-inputs/job-inputs.js';
import { checkOutput, JSON_CHECK_LIMIT, OUTPUT_MEDIA_TYPES, OutputCheck, outputTypesOf, servedAs } from '../../../src/orchestrator/blobs/output-media.js';
import { scriptedPng } from '../../helpers/scripted-agent.js';

/** What outputs may be, by job type, and how a blob is served (issue 19): the checks behind the blob route's headers. */
const refusal = (promise: Promise<unknown>) => promise.then(() => 'accepted', (error: Error & { code?: string }) => `${error.code}: ${error.message}`);
/** An `ftyp` box (ISO base media, as ffmpeg writes an MP4), then anything. */
const mp4 = Buffer.concat([Buffer.from([0, 0, 0, 0x18]), Buffer.from('ftypisom'), Buffer.from([0, 0, 2, 0]), Buffer.from('isomiso2'), Buffer.alloc(64)]);

describe('output media types', () => {
  it('every job type with input handling has a list, and every listed type is served as itself', () => {
    expect(Object.keys(OUTPUT_MEDIA_TYPES).sort()).toEqual(Object.keys(JOB_INPUTS).sort());
    for (const types of Object.values(OUTPUT_MEDIA_TYPES)) {
      for (const type of types) expect(servedAs(type).contentType.split(';')[0]).toBe(type);
    }
    expect(outputTypesOf('no-such-type')).toEqual([]);
    expect(outputTypesOf('toString')).toEqual([]);
  });

  it('serves only images and videos inline; other listed types as downloads; anything else as octets', () => {
    expect(servedAs('image/png')).toEqual({ contentType: 'image/png', extension: 'png', inline: true });
    expect(servedAs('video/mp4')).toEqual({ contentType: 'video/mp4', extension: 'mp4', inline: true });
    expect(servedAs('application/json')).toEqual({ contentType: 'application/json', extension: 'json', inline: false });
    expect(servedAs('text/plain')).toEqual({ contentType: 'text/plain; charset=utf-8', extension: 'txt', inline: false });
    for (const stored of ['text/html', 'image/svg+xml', 'application/javascript', 'application/xhtml+xml', 'IMAGE/PNG', '', null, undefined]) {
      expect(servedAs(stored), String(stored)).toEqual({ contentType: 'application/octet-stream', extension: 'bin', inline: false });
    }
  });

  it('accepts bytes that are what they claim, of a type the job type may produce', async () => {
    const png = scriptedPng('ok');
    const jpeg = await sharp(png).jpeg().toBuffer();
    const webp = await sharp(png).webp().toBuffer();
    expect(await refusal(checkOutput('image', 'image/png', png))).toBe('accepted');
    expect(await refusal(checkOutput('image', 'image/jpeg', jpeg))).toBe('accepted');
    expect(await refusal(checkOutput('video', 'image/webp', webp))).toBe('accepted');
    expect(await refusal(checkOutput('video', 'video/mp4', mp4))).toBe('accepted');
    expect(await refusal(checkOutput('tensor', 'application/json', Buffer.from(' {"y": [1, 2]}\n')))).toBe('accepted');
    // Raw bytes claim no type (a command's .npy array): nothing to check, served as a download.
    expect(await refusal(checkOutput('tensor', 'application/octet-stream', Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0])))).toBe('accepted');
    expect(await refusal(checkOutput('image', 'application/octet-stream', Buffer.from([1, 2, 3])))).toMatch(/^UNSUPPORTED_MEDIA_TYPE/);
    expect(await refusal(checkOutput('tensor', 'text/plain', Buffer.from('ünïcödé ✓\n')))).toBe('accepted');
  });

  it('refuses a type off the job type\'s list, and bytes that are not their declared type', async () => {
    expect(await refusal(checkOutput('image', 'text/html', Buffer.from('<script>alert(1)</script>'))))
      .toBe('UNSUPPORTED_MEDIA_TYPE: Unsupported content type: text/html is not an output type of image jobs (they may be: image/png, image/jpeg, image/webp, image/gif, application/json, text/plain)');
    expect(await refusal(checkOutput('tensor', 'image/png', scriptedPng('x')))).toContain('image/png is not an output type of tensor jobs');
    expect(await refusal(checkOutput('image', 'image/svg+xml', Buffer.from('<svg/>')))).toContain('is not an output type');
    expect(await refusal(checkOutput('video', 'video/mp4', scriptedPng('a poster, not a clip')))).toContain('the bytes are not video/mp4: their signature is that of image/png');
    expect(await refusal(checkOutput('image', 'image/png', Buffer.from('<html><script>1</script></html>')))).toContain('the bytes are not image/png: they carry no signature of a known media type');
    expect(await refusal(checkOutput('image', 'image/png', Buffer.alloc(0)))).toContain('the bytes are not image/png');
    expect(await refusal(checkOutput('image', 'application/json', Buffer.from('{"a": ')))).toContain('the bytes are not application/json: it does not parse as JSON');
    expect(await refusal(checkOutput('image', 'application/json', Buffer.alloc(0)))).toContain('does not parse as JSON');
    expect(await refusal(checkOutput('image', 'text/plain', Buffer.from([0x61, 0x00, 0x62])))).toContain('the bytes are not text/plain: it holds a NUL byte');
    expect(await refusal(checkOutput('image', 'text/plain', Buffer.from([0x61, 0xff, 0x62])))).toContain('it is not UTF-8 text');
    expect(await refusal(checkOutput('image', 'text/plain', Buffer.from([0x61, 0xe2, 0x9c])))).toContain('it is not UTF-8 text'); // cut off at the end
  });

  it('checks a stream chunk by chunk: a character split across chunks is text, the signature spans chunks', async () => {
    const text = Buffer.from('{"check": "✓"}');
    const split = new OutputCheck('image', 'application/json');
    for (let i = 0; i < text.length; i++) split.push(text.subarray(i, i + 1));
    await expect(split.finish()).resolves.toBeUndefined();
    const png = scriptedPng('chunks');
    const signature = new OutputCheck('image', 'image/png');
    for (let i = 0; i < png.length; i += 3) signature.push(png.subarray(i, i + 3));
    await expect(signature.finish()).resolves.toBeUndefined();
  });

  it('refuses JSON larger than it parses', async () => {
    const check = new OutputCheck('tensor', 'application/json');
    const chunk = Buffer.alloc(1024 * 1024, 0x20);
    for (let sent = 0; sent <= JSON_CHECK_LIMIT; sent += chunk.length) check.push(chunk);
    check.push(Buffer.from('1'));
    expect(await refusal(check.finish())).toContain(`it has more than ${JSON_CHECK_LIMIT} bytes, the most checked as JSON`);
  });

  it('refuses a type off the list before any byte', () => {
    expect(() => new OutputCheck('image', 'text/html')).toThrow('text/html is not an output type of image jobs');
  });
});
