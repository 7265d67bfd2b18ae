import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { z } from 'zod';
import type { Clock } from '../../../../src/protocol/clock.js';
import { JobBatch, JobStopped } from '../../../../src/agent/engines/kit/job-batch.js';
import { ServerHttp, untilDeadline, type HttpReply } from '../../../../src/agent/engines/kit/http.js';
import { errorForStatus, serverMessage, ServerError } from '../../../../src/agent/engines/kit/server-error.js';
import { ServerModel, type ServerBatch } from '../../../../src/agent/engines/kit/server.js';
import { splitLines } from '../../../../src/agent/engines/kit/lines.js';
import { pngFromBase64 } from '../../../../src/agent/engines/kit/png.js';
import { Backoff } from '../../../../src/net/backoff.js';
import { EngineError, type EngineJob, type Progress } from '../../../../src/agent/core/engine.js';
import { parseStepLines, StepLineTracker } from '../../../../src/agent/engines/sdcpp/step-lines.js';
import { FakeClock } from '../../../helpers/fake-clock.js';

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

/** Time that jumps to each timer at once: waits are recorded, not waited. */
class SkippingClock implements Clock {
  #now = 0;
  readonly waits: number[] = [];

  now(): number {
    return this.#now;
  }

  setTimer(ms: number, fn: () => void) {
    this.waits.push(ms);
    const handle = setImmediate(() => {
      this.#now += Math.max(0, ms);
      fn();
    });
    return { cancel: () => clearImmediate(handle) };
  }
}

/** A server that answers each request with the next of `answers` (the last one for ever after); `drop` cuts the connection. */
function scripted(answers: ({ status: number; body?: unknown; headers?: Record<string, string> } | 'drop')[]) {
  const seen: { method: string; path: string }[] = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    request.resume();
    request.on('end', () => {
      seen.push({ method: request.method!, path: request.url! });
      const answer = answers.length > 1 ? answers.shift()! : answers[0]!;
      if (answer === 'drop') return void request.socket.destroy();
      response.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers });
      response.end(answer.body === undefined ? '' : JSON.stringify(answer.body));
    });
  });
  return {
    seen,
    start: () => new Promise<string>((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`))),
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('the engine HTTP client: retries (virtual time)', () => {
  const busyBackoff = { initialMs: 500, maxMs: 5000, factor: 2 };

  it('waits out a full queue by the backoff, or longer when Retry-After says so, and returns the first answer that is not 429', async () => {
    const server = scripted([{ status: 429 }, { status: 429, headers: { 'retry-after': '3' } }, { status: 202, body: { id: 'j1' } }]);
    const clock = new SkippingClock();
    const http = new ServerHttp({ server: { url: await server.start() }, model: 'm', timeoutMs: 5000, clock });
    const reply = await http.request('POST', '/x', { json: {}, retry: untilDeadline(busyBackoff, 60_000) });
    await server.stop();
    expect(reply).toMatchObject({ status: 202, json: { id: 'j1' } });
    expect(clock.waits).toEqual([500, 3000]);
    expect(server.seen).toHaveLength(3);
  });

  it('gives up with ENGINE_BUSY, saying how long it waited, rather than wait past the deadline', async () => {
    const server = scripted([{ status: 429, body: { error: 'job queue is full' } }]);
    const clock = new SkippingClock();
    const url = await server.start();
    const http = new ServerHttp({ server: { url }, model: 'm', timeoutMs: 5000, clock });
    const error = await http.request('POST', '/x', { json: {}, retry: untilDeadline(busyBackoff, 2000) }).catch((caught: unknown) => caught);
    await server.stop();
    expect(error).toBeInstanceOf(ServerError);
    expect(error).toMatchObject({ code: 'ENGINE_BUSY', retryable: true, message: `The engine server ${url} kept answering that its queue is full for 1500 ms` });
    expect(error).toMatchObject({ status: 429, serverMessage: 'job queue is full', busy: true });
    expect(server.seen).toHaveLength(3); // at 0, 500, 1500; the next wait (2000) would pass the deadline
  });

  it('a bounded number of retries of 429/503, honouring Retry-After up to the ceiling; then the last answer\'s error, with its facts', async () => {
    const server = scripted([{ status: 503, headers: { 'retry-after': '30' } }, { status: 429, body: { error: { message: 'slow down', details: 'queue' } } }]);
    const clock = new SkippingClock();
    const http = new ServerHttp({ server: { url: await server.start() }, model: 'm', name: 'Stand-in', timeoutMs: 5000, clock, retry: { retries: 2 } });
    const error = await http.request('GET', '/y').catch((caught: unknown) => caught as ServerError);
    await server.stop();
    expect(clock.waits).toEqual([2000, 200]);
    expect(server.seen).toHaveLength(3);
    expect(error).toMatchObject({ failure: 'status', status: 429, busy: true, serverMessage: 'slow down: queue', body: { error: { message: 'slow down', details: 'queue' } } });
    expect((error as ServerError).summary).toMatch(/^Stand-in at http:\/\/127\.0\.0\.1:\d+ answered 429: slow down: queue$/);
  });

  it('sends an idempotent request again after a dropped connection; never one that is not (it may have queued work)', async () => {
    const reads = scripted(['drop', { status: 200, body: { ok: true } }]);
    const writes = scripted(['drop', { status: 200, body: {} }]);
    const clock = new SkippingClock();
    const options = { model: 'm', name: 'Stand-in', timeoutMs: 5000, clock, retry: { retries: 2 } };
    const read = new ServerHttp({ ...options, server: { url: await reads.start() } });
    const write = new ServerHttp({ ...options, server: { url: await writes.start() } });
    expect(await read.json('GET', '/read')).toEqual({ ok: true });
    const error = await write.request('POST', '/queue-it', { json: {} }).catch((caught: unknown) => caught as ServerError);
    await Promise.all([reads.stop(), writes.stop()]);
    expect([reads.seen.length, writes.seen.length]).toEqual([2, 1]);
    expect(error).toMatchObject({ code: 'ENGINE_UNREACHABLE', retryable: true, failure: 'dropped', status: null });
    expect((error as ServerError).summary).toMatch(/^Stand-in at .* is unreachable: POST \/queue-it: the connection closed before an answer/);
  });

  it('no server: ENGINE_UNREACHABLE; an answer that is not what the schema says: a retryable protocol error', async () => {
    const nowhere = new ServerHttp({ server: { url: 'http://127.0.0.1:9' }, model: 'm', timeoutMs: 5000 });
    await expect(nowhere.request('GET', '/')).rejects.toMatchObject({ code: 'ENGINE_UNREACHABLE', failure: 'unreachable', retryable: true });
    const server = scripted([{ status: 200, body: 'x' }]);
    const http = new ServerHttp({ server: { url: await server.start() }, model: 'm', timeoutMs: 5000 });
    await expect(http.json('GET', '/id', { schema: z.object({ id: z.string() }) }))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', failure: 'protocol', retryable: true, message: expect.stringMatching(/unexpected answer to GET \/id: 200 body: /) });
    await server.stop();
  });
});

describe('the base of a model on a server', () => {
  class Recorded implements ServerBatch {
    readonly cancelled: string[] = [];
    unloaded = false;
    readonly #done: Promise<void>;
    finish!: () => void;

    constructor(readonly jobs: readonly { id: string }[]) {
      this.#done = new Promise((resolve) => (this.finish = resolve));
    }

    async run() {
      await this.#done;
      return this.jobs.map((job) => (this.cancelled.includes(job.id)
        ? { jobId: job.id, ok: false as const, code: 'CANCELLED' as const, message: 'cancelled', retryable: false }
        : { jobId: job.id, ok: true as const, files: [] }));
    }

    cancel(jobIds: readonly string[]) {
      this.cancelled.push(...jobIds.filter((id) => this.jobs.some((job) => job.id === id)));
    }

    unload() {
      this.unloaded = true;
      this.finish();
    }
  }

  class Model extends ServerModel {
    readonly batches: Recorded[] = [];
    protected batch(jobs: readonly { id: string }[]) {
      const batch = new Recorded(jobs);
      this.batches.push(batch);
      return batch;
    }
  }

  const manifest = { name: 'm', version: '1', engine: 'x', digest: `sha256:${'0'.repeat(64)}`, bytes: 0, memoryMB: 1, jobTypes: ['image'], params: {}, settings: {} } as never;
  const job = (id: string) => ({ id, input: {} });

  it('remembers a cancel that comes before its batch; cancels reach the batch in flight; unload stops it, releases the endpoint, and refuses runs', async () => {
    const released: string[] = [];
    const model = new Model({ manifest, device: { id: 'cpu', kind: 'cpu' } as never, memoryMB: 7, endpoint: { url: 'http://x', release: async () => { released.push('x'); } } });
    model.cancel(['early']);
    const running = model.run([job('early'), job('a'), job('b')], () => {});
    const batch = model.batches[0]!;
    model.cancel(['a', 'elsewhere']);
    expect(batch.cancelled).toEqual(['early', 'a']);
    const unloaded: string[] = [];
    model.onUnload(() => unloaded.push('told'));
    await model.unload();
    await model.unload();
    expect(batch.unloaded).toBe(true);
    expect((await running).outputs.map((output) => output.ok)).toEqual([false, false, true]);
    expect([released, unloaded]).toEqual([['x'], ['told']]);
    await expect(model.run([job('c')], () => {})).rejects.toMatchObject({ code: 'ENGINE_FAILED', message: 'model "m" is unloaded' });
    expect(model.memoryMB).toBe(7);
  });
});

describe('job batches (fake clock)', () => {
  const jobs = (n: number, deadlineAt?: number): EngineJob[] => Array.from({ length: n }, (_, i) => ({ id: `j${i}`, input: {}, deadlineAt }));
  const png = { bytes: new Uint8Array([1]), mediaType: 'image/png' };

  it('runs at most `concurrency` jobs at once and returns one output per job, in order, whatever order they finish in', async () => {
    const clock = new FakeClock(0);
    let running = 0;
    let most = 0;
    const batch = new JobBatch(jobs(5), {
      concurrency: 2, clock, budgetMs: 60_000, stepsOf: () => 1, onProgress: () => {},
      runOne: async (job) => {
        running++;
        most = Math.max(most, running);
        // Later jobs finish sooner.
        await new Promise((resolve) => setTimeout(resolve, 50 - Number(job.id.slice(1)) * 10));
        running--;
        if (job.id === 'j3') throw new EngineError('INVALID_INPUT', 'bad j3', false);
        return [png];
      },
    });
    const outputs = await batch.run();
    expect(most).toBe(2);
    expect(outputs.map((output) => [output.jobId, output.ok])).toEqual([['j0', true], ['j1', true], ['j2', true], ['j3', false], ['j4', true]]);
    expect(outputs[3]).toMatchObject({ code: 'INVALID_INPUT', message: 'bad j3', retryable: false });
  });

  it('sums the jobs\' progress into the batch\'s: steps done of all steps, only ever rising', async () => {
    const progress: Progress[] = [];
    const batch = new JobBatch(jobs(2), {
      concurrency: 1, clock: new FakeClock(0), budgetMs: 60_000, stepsOf: () => 4, onProgress: (step) => progress.push(step),
      runOne: async (job, context) => {
        context.progress(2);
        context.progress(1); // a stale report changes nothing
        if (job.id === 'j1') context.progress(3, 6); // the server says this job has 6 steps
        return [png];
      },
    });
    await batch.run();
    expect(progress).toEqual([{ step: 2, total: 8 }, { step: 4, total: 8 }, { step: 6, total: 8 }, { step: 7, total: 10 }, { step: 10, total: 10 }]);
  });

  it('a job past its deadline ends DEADLINE_EXCEEDED; past the engine\'s budget, a retryable ENGINE_FAILED', async () => {
    const clock = new FakeClock(0);
    const hang = (_job: EngineJob, context: { signal: AbortSignal }) =>
      new Promise<never>((_, reject) => context.signal.addEventListener('abort', () => reject(context.signal.reason)));
    const batch = new JobBatch([...jobs(1, 1000), { id: 'free', input: {} }], { concurrency: 2, clock, budgetMs: 5000, stepsOf: () => 1, onProgress: () => {}, runOne: hang });
    const outputs = batch.run();
    await flush();
    clock.advance(1000);
    await flush();
    clock.advance(4000);
    expect(await outputs).toMatchObject([
      { jobId: 'j0', ok: false, code: 'DEADLINE_EXCEEDED', retryable: false },
      { jobId: 'free', ok: false, code: 'ENGINE_FAILED', retryable: true },
    ]);
  });

  it('cancelling a job aborts only its signal; a job cancelled before its turn never runs; unloading fails the rest retryably', async () => {
    const started: string[] = [];
    const batch: JobBatch = new JobBatch(jobs(4), {
      concurrency: 1, clock: new FakeClock(0), budgetMs: 60_000, stepsOf: () => 1, onProgress: () => {},
      runOne: async (job, context) => {
        started.push(job.id);
        if (job.id === 'j0') batch.cancel(['j0']);
        if (job.id === 'j3') batch.unload();
        if (context.signal.aborted) throw context.signal.reason as JobStopped;
        return [png];
      },
    });
    batch.cancel(['j2']);
    const outputs = await batch.run();
    expect(started).toEqual(['j0', 'j1', 'j3']);
    expect(outputs.map((output) => (output.ok ? 'ok' : output.code))).toEqual(['CANCELLED', 'ok', 'CANCELLED', 'ENGINE_FAILED']);
    expect(outputs[3]).toMatchObject({ retryable: true, message: 'the model was unloaded while the job ran' });
  });
});
