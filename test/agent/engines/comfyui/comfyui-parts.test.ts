import { pino } from 'pino';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { describeExecutionError, oneLine } from '../../../../src/agent/engines/comfyui/errors.js';
import { PreviewGate } from '../../../../src/agent/engines/comfyui/previews.js';
import { previewOfFrame, type ComfyPreview } from '../../../../src/agent/engines/comfyui/socket.js';
import { BatchProgress } from '../../../../src/agent/engines/kit/batch-progress.js';
import type { Progress } from '../../../../src/agent/core/engine.js';
import { FakeClock } from '../../../helpers/fake-clock.js';

/** The parts of the ComfyUI adapter that need no server: frames, error lines, the preview gate, one progress bar. */
const frame = (...words: number[]): Buffer => {
  const header = Buffer.alloc(words.length * 4);
  words.forEach((word, i) => header.writeUInt32BE(word, i * 4));
  return header;
};

describe('binary frames (server.py send_image, send_image_with_metadata)', () => {
  it('PREVIEW_IMAGE: the format word, then the picture; with metadata: its length, its JSON, then the picture; others are not previews', () => {
    const jpeg = Buffer.from([0xff, 0xd8, 0xff, 0xe0]);
    expect(previewOfFrame(Buffer.concat([frame(1, 1), jpeg]))).toEqual({ format: 'jpeg', bytes: jpeg, promptId: null });
    expect(previewOfFrame(Buffer.concat([frame(1, 2), jpeg]))?.format).toBe('png');
    const metadata = Buffer.from(JSON.stringify({ prompt_id: 'p1', node_id: '3', image_type: 'image/png' }));
    expect(previewOfFrame(Buffer.concat([frame(4, metadata.length), metadata, jpeg]))).toEqual({ format: 'png', bytes: jpeg, promptId: 'p1' });
    expect(previewOfFrame(Buffer.concat([frame(3, 4), Buffer.from('node3text')]))).toBeNull(); // TEXT
    expect(previewOfFrame(frame(1))).toBeNull();
    expect(previewOfFrame(Buffer.concat([frame(4, 999), metadata]))).toBeNull();
  });
});

describe('error lines', () => {
  it('the first line that says something, server paths cut to their last part, no banner asterisks', () => {
    const message = '**** ERROR: Saving image outside the output folder is not allowed.\n full_output_folder: /srv/ComfyUI/outside\n         output_dir: /srv/ComfyUI/output';
    expect(oneLine(message)).toBe('ERROR: Saving image outside the output folder is not allowed.');
    expect(oneLine('\n\nCould not open /home/me/ComfyUI/models/checkpoints/x.safetensors: no such file')).toBe('Could not open …/x.safetensors: no such file');
    expect(oneLine('C:\\ComfyUI\\nodes.py failed at 1/2 of the steps')).toBe('…/nodes.py failed at 1/2 of the steps');
    expect(oneLine('x'.repeat(400))).toHaveLength(300);
    expect(describeExecutionError({ node_id: '9', node_type: 'SaveImage', exception_type: 'Exception', exception_message: message }))
      .toBe('node 9 (SaveImage) failed: Exception: ERROR: Saving image outside the output folder is not allowed.');
  });
});

describe('PreviewGate', () => {
  it('at most `limit` previews, `intervalMs` apart, the newest frame of those between; JPEG becomes PNG; nothing after close', async () => {
    const clock = new FakeClock();
    const sent: Buffer[] = [];
    const gate = new PreviewGate({ limit: 2, intervalMs: 1000, clock, log: pino({ level: 'silent' }), emit: (png) => sent.push(Buffer.from(png)) });
    const picture = (value: number, format: 'jpeg' | 'png') => sharp({ create: { width: 4, height: 4, channels: 3, background: { r: value, g: value, b: value } } })[format]().toBuffer();
    const offer = async (value: number, format: 'jpeg' | 'png' = 'png'): Promise<ComfyPreview> => {
      const preview = { format, bytes: await picture(value, format), promptId: null };
      gate.offer(preview);
      return preview;
    };
    const first = await offer(10, 'jpeg');
    await new Promise((resolve) => setTimeout(resolve, 50)); // the JPEG is converted off the event loop
    expect(sent).toHaveLength(1);
    expect((await sharp(sent[0]!).metadata()).format).toBe('png');
    expect(sent[0]!.equals(first.bytes)).toBe(false);
    await offer(20);
    const newest = await offer(30);
    expect(sent).toHaveLength(1);
    clock.advance(1000);
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(sent).toHaveLength(2);
    expect(sent[1]!.equals(newest.bytes)).toBe(true); // a PNG goes as it came
    await offer(40);
    clock.advance(5000);
    expect(sent).toHaveLength(2);
    gate.close();
  });
});

describe('BatchProgress.set', () => {
  it('a job\'s whole count set up front: the step and the share done never go back, even when a count grows', () => {
    const seen: Progress[] = [];
    const progress = new BatchProgress(1, (step) => seen.push(step));
    progress.set(0, 0, 11);
    for (let step = 1; step <= 4; step++) progress.set(0, step, 11);
    progress.set(0, 5, 14); // a node nobody expected reported: 5/14 < 4/11 is held back
    progress.set(0, 9, 14);
    progress.complete(0);
    expect(seen.map(({ step, total }) => `${step}/${total}`)).toEqual(['1/11', '2/11', '3/11', '4/11', '9/14', '14/14']);
    expect(progress.current).toEqual({ step: 14, total: 14 });
  });
});
