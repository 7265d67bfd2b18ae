import { Backoff } from '../../net/backoff.js';
import { httpRequest } from '../../net/http-client.js';
import type { Clock } from '../../protocol/clock.js';
import type { LogTail } from './log-tail.js';

export class NotReadyError extends Error {
  override readonly name = 'NotReadyError';
}

/** One GET; true for a 2xx. Each poll has its own deadline, so a server that accepts and never answers cannot stall the check. */
async function probe(url: URL, timeoutMs: number): Promise<boolean> {
  try {
    const answer = await httpRequest(url, { agent: false, timeoutMs });
    return answer.status >= 200 && answer.status < 300;
  } catch {
    return false; // refused, dropped or silent: not ready yet
  }
}

/** The first pause between readiness polls; each further one doubles, up to the configured interval. */
const FIRST_POLL_PAUSE_MS = 5;

/**
 * The pauses between polls, adaptive: 5, 10, 20 … ms up to `intervalMs`. A server that is ready in 30 ms is seen
 * within a few ms of it rather than at the next fixed 200 ms tick (a cold start's ready phase would otherwise be
 * rounded up to the interval), and one that takes minutes is still polled only every `intervalMs`.
 */
export function pollPauses(intervalMs: number): Backoff {
  return new Backoff({ initialMs: Math.min(FIRST_POLL_PAUSE_MS, intervalMs), maxMs: intervalMs });
}

/**
 * Poll `url` until it answers 2xx; reject after `timeoutMs` or when `signal` aborts (the process exited). With
 * `tail` (the server's output), a line the server prints cuts the pause short: servers say something when they
 * start listening, so the poll that sees it ready comes within a few ms of that line instead of up to a whole
 * interval later. Lines only wake the poll; readiness is still the 2xx.
 */
export async function waitForHttp(url: URL, options: { timeoutMs: number; intervalMs: number; clock: Clock; signal: AbortSignal; tail?: LogTail }): Promise<void> {
  const deadline = options.clock.now() + options.timeoutMs;
  const pauses = pollPauses(options.intervalMs);
  let last = 'no answer yet';
  let wake: (() => void) | null = null;
  let spoke = false;
  options.tail?.onLine(() => {
    spoke = true;
    wake?.();
  });
  try {
    for (;;) {
      if (options.signal.aborted) throw options.signal.reason;
      const left = deadline - options.clock.now();
      if (left <= 0) throw new NotReadyError(`GET ${url.pathname} did not answer 2xx within ${options.timeoutMs} ms (${last})`);
      spoke = false;
      if (await probe(url, Math.min(2000, left))) return;
      last = 'the last poll failed or timed out';
      // A line printed while that poll was out is news too: poll again at once.
      if (spoke) continue;
      await pause(Math.min(pauses.next(), Math.max(0, deadline - options.clock.now())), options.clock, options.signal, (early) => (wake = early));
      wake = null;
    }
  } finally {
    options.tail?.onLine(null);
  }
}

/** Resolve when a line of the process's output matches `pattern`; reject after `timeoutMs` or on abort. */
export function waitForLogLine(tail: LogTail, pattern: RegExp, options: { timeoutMs: number; clock: Clock; signal: AbortSignal }): Promise<void> {
  return new Promise((resolve, reject) => {
    const finish = (error?: unknown): void => {
      timer.cancel();
      tail.onLine(null);
      options.signal.removeEventListener('abort', onAbort);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onAbort = (): void => finish(options.signal.reason);
    const timer = options.clock.setTimer(options.timeoutMs, () =>
      finish(new NotReadyError(`no line of output matched /${pattern.source}/ within ${options.timeoutMs} ms`)));
    options.signal.addEventListener('abort', onAbort, { once: true });
    if (options.signal.aborted) return onAbort();
    tail.onLine((line) => {
      if (pattern.test(line)) finish();
    });
  });
}

/** Wait `ms`, or less if `signal` aborts or the function handed to `onWake` is called. */
function pause(ms: number, clock: Clock, signal: AbortSignal, onWake?: (wake: () => void) => void): Promise<void> {
  return new Promise((resolve) => {
    const timer = clock.setTimer(ms, () => {
      signal.removeEventListener('abort', done);
      resolve();
    });
    const done = (): void => {
      timer.cancel();
      signal.removeEventListener('abort', done);
      resolve();
    };
    signal.addEventListener('abort', done, { once: true });
    onWake?.(done);
  });
}
