import type { Clock } from '../../../protocol/clock.js';
import { formatError } from '../../../protocol/index.js';
import { EngineError } from '../engine.js';
import { JobStopped } from './batch.js';
import type { HttpReply } from './client.js';
import { sleep } from '../../../protocol/clock.js';
import { Backoff, retryAfterMs, type BackoffOptions } from './timing.js';

export interface BusyRetry {
  clock: Clock;
  signal: AbortSignal;
  /** Give up (with `ENGINE_BUSY`) rather than wait past this epoch ms. */
  deadlineAt: number;
  backoff: BackoffOptions;
  /** The server's base URL, for the message. */
  url: string;
}

/**
 * Send a request again while the server answers 429 (its queue is full, or a rate limit): a full
 * queue empties as the server works, so waiting beats failing the job. Waits grow by the backoff,
 * or follow the server's `Retry-After` when it is longer; once the next wait would pass the job's
 * deadline, fails with `ENGINE_BUSY` (retryable: another replica may have room). Any other answer
 * is returned as it is.
 */
export async function retryWhileBusy(send: () => Promise<HttpReply>, options: BusyRetry): Promise<HttpReply> {
  const { clock, signal, deadlineAt } = options;
  const backoff = new Backoff(options.backoff);
  const started = clock.now();
  const busy = (): EngineError =>
    new EngineError('ENGINE_BUSY', formatError('ENGINE_BUSY', { url: new URL(options.url).origin, waitedMs: clock.now() - started }), true);
  let refused = false;
  for (;;) {
    let reply: HttpReply;
    try {
      reply = await send();
    } catch (error) {
      // Time ran out during a retry: the full queue is the story, not the clock.
      if (refused && ranOutOfTime(signal)) throw busy();
      throw error;
    }
    if (reply.status !== 429) return reply;
    refused = true;
    const header = reply.headers['retry-after'];
    const wait = Math.max(backoff.next(), retryAfterMs(Array.isArray(header) ? header[0]! : header ?? null, clock.now()) ?? 0);
    if (clock.now() + wait >= deadlineAt) throw busy();
    try {
      await sleep(clock, wait, signal);
    } catch (error) {
      if (ranOutOfTime(signal)) throw busy();
      throw error;
    }
  }
}

const ranOutOfTime = (signal: AbortSignal): boolean =>
  signal.aborted && signal.reason instanceof JobStopped && (signal.reason.why === 'deadline' || signal.reason.why === 'budget');
