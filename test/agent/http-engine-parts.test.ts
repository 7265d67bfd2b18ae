import { describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { JobBatch, JobStopped } from '../../src/agent/engines/http/batch.js';
import { retryWhileBusy } from '../../src/agent/engines/http/busy.js';
import type { HttpReply } from '../../src/agent/engines/http/client.js';
import { errorForStatus, serverMessage } from '../../src/agent/engines/http/errors.js';
import { splitLines } from '../../src/agent/engines/http/lines.js';
import { pngFromBase64 } from '../../src/agent/engines/http/png.js';
import { Backoff } from '../../src/agent/engines/http/timing.js';
import { EngineError, type EngineJob, type Progress } from '../../src/agent/engines/engine.js';
import { parseStepLines, StepLineTracker } from '../../src/agent/engines/sdcpp/step-lines.js';
import { FakeClock } from '../helpers/fake-clock.js';

/** Let pending promise callbacks run. */
const flush = async (): Promise<void> => {
  for (let i = 0; i < 10; i++) await Promise.resolve();
};

const reply = (status: number, json: unknown, headers: Record<string, string> = {}): HttpReply => {
  const text = typeof json === 'string' ? json : JSON.stringify(json);
  return { status, headers, bytes: Buffer.from(text), text, json: typeof json === 'string' ? undefined : json };
};

/** sd.cpp's bar, byte for byte as util.cpp prints it. */
const bar = (step: number, steps: number, unit = '1.25s/it'): string => `\r  |${'='.repeat(20)}>${' '.repeat(29)}| ${step}/${steps} - ${unit}\u001b[K${step === steps ? '\n' : ''}`;

describe('sd.cpp step bars', () => {
  it('reads each redraw of the bar, in s/it or it/s; not the model-load bar in MB/s', () => {
    expect(parseStepLines(bar(3, 20))).toEqual([{ step: 3, total: 20 }]);
    expect(parseStepLines(bar(7, 8, '4.50it/s'))).toEqual([{ step: 7, total: 8 }]);
    expect(parseStepLines(`\r  |${'='.repeat(50)}| 1130/1130 - 250.00MB/s\u001b[K`)).toEqual([]);
    expect(parseStepLines('[INFO ] stable-diffusion.cpp:2580 - sampling completed, taking 12.43s')).toEqual([]);
    // A reader that split only on \n hands over every redraw in one line.
    expect(parseStepLines(bar(1, 3) + bar(2, 3) + bar(3, 3))).toEqual([1, 2, 3].map((step) => ({ step, total: 3 })));
  });

  it('gives bars to the jobs in the order the server took them, moving on when a bar completes or starts over', () => {
    const tracker = new StepLineTracker();
    const seen: string[] = [];
    for (const id of ['a', 'b', 'c']) tracker.register(id, 3, (step) => seen.push(`${id}${step}`));
    for (const step of [1, 2, 3]) tracker.feed(bar(step, 3));
    // b failed after its first step: the next bar starting over belongs to c.
    tracker.feed(bar(1, 3));
    tracker.feed(bar(1, 3));
    tracker.feed(bar(2, 3));
    expect(seen).toEqual(['a1', 'a2', 'a3', 'b1', 'c1', 'c2']);
  });

  it('skips jobs that never reached the sampler, and bars of another length (tiled VAE decoding)', () => {
    const tracker = new StepLineTracker();
    const seen: string[] = [];
    for (const id of ['a', 'b']) tracker.register(id, 4, (step) => seen.push(`${id}${step}`));
    tracker.end('a', false); // cancelled while queued
    tracker.feed(bar(1, 4));
    tracker.feed(bar(5, 16)); // a tile bar
    tracker.feed(bar(2, 4));
    expect(seen).toEqual(['b1', 'b2']);
  });

  it('a job whose result came before its last bars still gets them; then the next job gets its own', () => {
    const tracker = new StepLineTracker();
    const seen: string[] = [];
    for (const id of ['a', 'b']) tracker.register(id, 2, (step) => seen.push(`${id}${step}`));
    tracker.feed(bar(1, 2));
    tracker.end('a', true); // the poll saw "completed" before the pipe delivered a's last bar
    tracker.feed(bar(2, 2));
    tracker.feed(bar(1, 2));
    expect(seen).toEqual(['a1', 'b1']);
    expect(tracker.pending).toBe(1);
  });

  it('splits a process\'s output on \\r and \\n across chunk boundaries', async () => {
    async function* chunks(): AsyncGenerator<string> {
      yield 'first li';
      yield 'ne\r\nsecond\rthi';
      yield 'rd';
    }
    const lines: string[] = [];
    for await (const line of splitLines(chunks())) lines.push(line);
    expect(lines).toEqual(['first line', 'second', 'third']);
  });
});

describe('server errors', () => {
  const context = { model: 'm', url: 'http://gpu1:7860', what: 'POST /x' };

  it('reads each server family\'s error shape', () => {
    expect(serverMessage(reply(400, { error: 'invalid generation parameters' }))).toBe('invalid generation parameters');
    expect(serverMessage(reply(400, { error: 'invalid json', message: 'unexpected end' }))).toBe('invalid json: unexpected end');
    expect(serverMessage(reply(400, { error: { message: 'Bad size', type: 'invalid_request_error', param: 'size', code: 'invalid_value' } })))
      .toBe('Bad size (param size, code invalid_value)');
    expect(serverMessage(reply(422, { detail: [{ loc: ['body', 'steps'], msg: 'not an int' }] }))).toContain('not an int');
    expect(serverMessage(reply(500, 'Internal Server Error'))).toBe('Internal Server Error');
  });

  it('maps statuses: input at fault (not retryable), configuration (not retryable), server (retryable), busy', () => {
    expect(errorForStatus(reply(400, { error: 'x' }), context)).toMatchObject({ code: 'INVALID_INPUT', retryable: false });
    expect(errorForStatus(reply(422, { detail: 'x' }), context)).toMatchObject({ code: 'INVALID_INPUT', retryable: false });
    expect(errorForStatus(reply(401, { error: { message: 'no' } }), context)).toMatchObject({ code: 'ENGINE_FAILED', retryable: false });
    expect(errorForStatus(reply(404, 'nope'), context)).toMatchObject({ code: 'ENGINE_FAILED', retryable: false });
    expect(errorForStatus(reply(503, 'loading'), context)).toMatchObject({ code: 'ENGINE_FAILED', retryable: true });
    expect(errorForStatus(reply(429, { error: 'job queue is full' }), context)).toMatchObject({ code: 'ENGINE_BUSY', retryable: true });
    expect(errorForStatus(reply(400, { error: 'x' }), context).message).toBe('Invalid input for model "m": http://gpu1:7860 refused POST /x with 400: x');
  });
});

describe('PNG outputs', () => {
  it('takes raw base64 or a data URL, reads the size from the header, refuses anything else', async () => {
    const png = await sharp({ create: { width: 40, height: 24, channels: 3, background: '#123456' } }).png().toBuffer();
    expect(pngFromBase64(png.toString('base64'))).toMatchObject({ mediaType: 'image/png', width: 40, height: 24 });
    expect(Buffer.from(pngFromBase64(`data:image/png;base64,${png.toString('base64')}`).bytes).equals(png)).toBe(true);
    const jpeg = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#fff' } }).jpeg().toBuffer();
    expect(() => pngFromBase64(jpeg.toString('base64'))).toThrow(/not a PNG/);
    expect(() => pngFromBase64('')).toThrow(/not a PNG/);
  });
});

describe('backoff', () => {
  it('grows by its factor to its ceiling, and starts over on reset', () => {
    const backoff = new Backoff({ initialMs: 100, maxMs: 1000, factor: 2 });
    expect([1, 2, 3, 4, 5].map(() => backoff.next())).toEqual([100, 200, 400, 800, 1000]);
    backoff.reset();
    expect(backoff.next()).toBe(100);
  });
});

describe('retrying while the server is busy (fake clock)', () => {
  it('waits by the backoff, or longer when Retry-After says so, and returns the first answer that is not 429', async () => {
    const clock = new FakeClock(0);
    const answers = [reply(429, {}), reply(429, {}, { 'retry-after': '3' }), reply(202, { id: 'j1' })];
    const sentAt: number[] = [];
    const result = retryWhileBusy(async () => {
      sentAt.push(clock.now());
      return answers.shift()!;
    }, { clock, signal: new AbortController().signal, deadlineAt: 60_000, backoff: { initialMs: 500, maxMs: 5000, factor: 2 }, url: 'http://gpu1:1' });
    for (let i = 0; i < 10; i++) {
      await flush();
      clock.advance(500);
    }
    expect((await result).status).toBe(202);
    expect(sentAt).toEqual([0, 500, 3500]);
  });

  it('gives up with ENGINE_BUSY, saying how long it waited, rather than wait past the deadline', async () => {
    const clock = new FakeClock(0);
    let sent = 0;
    const result = retryWhileBusy(async () => {
      sent++;
      return reply(429, { error: 'job queue is full' });
    }, { clock, signal: new AbortController().signal, deadlineAt: 2000, backoff: { initialMs: 500, maxMs: 5000, factor: 2 }, url: 'http://gpu1:1' });
    const settled = result.catch((error: unknown) => error);
    for (let i = 0; i < 10; i++) {
      await flush();
      clock.advance(250);
    }
    const error = await settled;
    expect(error).toBeInstanceOf(EngineError);
    expect(error).toMatchObject({ code: 'ENGINE_BUSY', retryable: true, message: 'The engine server http://gpu1:1 kept answering that its queue is full for 1500 ms' });
    expect(sent).toBe(3); // at 0, 500, 1500; the next wait (2000) would pass the deadline
  });
});

describe('job batches (fake clock)', () => {
  const jobs = (n: number, deadlineAt?: number): EngineJob[] => Array.from({ length: n }, (_, i) => ({ id: `j${i}`, input: {}, deadlineAt }));
  const png = { bytes: new Uint8Array([1]), mediaType: 'image/png' };

  it('runs at most `concurrency` jobs at once and returns one output per job, in order, whatever order they finish in', async () => {
    const clock = new FakeClock(0);
    let running = 0;
    let most = 0;
    const batch = new JobBatch(jobs(5), { concurrency: 2, clock, budgetMs: 60_000, stepsOf: () => 1, onProgress: () => {} });
    const outputs = await batch.run(async (job) => {
      running++;
      most = Math.max(most, running);
      // Later jobs finish sooner.
      await new Promise((resolve) => setTimeout(resolve, 50 - Number(job.id.slice(1)) * 10));
      running--;
      if (job.id === 'j3') throw new EngineError('INVALID_INPUT', 'bad j3', false);
      return [png];
    });
    expect(most).toBe(2);
    expect(outputs.map((output) => [output.jobId, output.ok])).toEqual([['j0', true], ['j1', true], ['j2', true], ['j3', false], ['j4', true]]);
    expect(outputs[3]).toMatchObject({ code: 'INVALID_INPUT', message: 'bad j3', retryable: false });
  });

  it('sums the jobs\' progress into the batch\'s: steps done of all steps, only ever rising', async () => {
    const progress: Progress[] = [];
    const batch = new JobBatch(jobs(2), { concurrency: 1, clock: new FakeClock(0), budgetMs: 60_000, stepsOf: () => 4, onProgress: (step) => progress.push(step) });
    await batch.run(async (job, context) => {
      context.progress(2);
      context.progress(1); // a stale report changes nothing
      if (job.id === 'j1') context.progress(3, 6); // the server says this job has 6 steps
      return [png];
    });
    expect(progress).toEqual([{ step: 2, total: 8 }, { step: 4, total: 8 }, { step: 6, total: 8 }, { step: 7, total: 10 }, { step: 10, total: 10 }]);
  });

  it('a job past its deadline ends DEADLINE_EXCEEDED; past the engine\'s budget, a retryable ENGINE_FAILED', async () => {
    const clock = new FakeClock(0);
    const hang = (_job: EngineJob, context: { signal: AbortSignal }) =>
      new Promise<never>((_, reject) => context.signal.addEventListener('abort', () => reject(context.signal.reason)));
    const batch = new JobBatch([...jobs(1, 1000), { id: 'free', input: {} }], { concurrency: 2, clock, budgetMs: 5000, stepsOf: () => 1, onProgress: () => {} });
    const outputs = batch.run(hang);
    await flush();
    clock.advance(1000);
    await flush();
    clock.advance(4000);
    expect(await outputs).toMatchObject([
      { jobId: 'j0', ok: false, code: 'DEADLINE_EXCEEDED', retryable: false },
      { jobId: 'free', ok: false, code: 'ENGINE_FAILED', retryable: true },
    ]);
  });

  it('stopping a job aborts only its signal; a job stopped before its turn never runs', async () => {
    const started: string[] = [];
    const batch = new JobBatch(jobs(3), { concurrency: 1, clock: new FakeClock(0), budgetMs: 60_000, stepsOf: () => 1, onProgress: () => {} });
    batch.stop('cancelled', ['j2']);
    const outputs = await batch.run(async (job, context) => {
      started.push(job.id);
      if (job.id === 'j0') batch.stop('cancelled', ['j0']);
      if (context.signal.aborted) throw context.signal.reason as JobStopped;
      return [png];
    });
    expect(started).toEqual(['j0', 'j1']);
    expect(outputs.map((output) => (output.ok ? 'ok' : output.code))).toEqual(['CANCELLED', 'ok', 'CANCELLED']);
  });
});
