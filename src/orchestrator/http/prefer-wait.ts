import { LIMITS, MeshError, TERMINAL_STATUSES, type JobStatus } from '../../protocol/index.js';
import type { EventBus } from '../events/event-bus.js';
import type { Timer } from '../../protocol/clock.js';

/**
 * The `wait` preference of a submit's `Prefer` header (RFC 7240), in seconds; null when there is none. Other
 * preferences are ignored, as the RFC asks; a `wait` that is not whole seconds from 1 to the limit is a 400 that
 * says so, rather than a wait the client did not mean.
 */
export function preferredWait(header: string | string[] | undefined): number | null {
  if (header === undefined) return null; // most submits: no preference to parse
  const text = Array.isArray(header) ? header.join(',') : header;
  for (const part of text.split(/[,;]/)) {
    const [name, value = ''] = part.split('=').map((piece) => piece.trim());
    if (name?.toLowerCase() !== 'wait') continue;
    const seconds = /^\d{1,6}$/.test(value) ? Number(value) : NaN;
    if (!(seconds >= 1 && seconds <= LIMITS.preferWaitSeconds)) {
      throw new MeshError('BAD_REQUEST', { detail: `Prefer: wait=${value.slice(0, 20)}: give whole seconds from 1 to ${LIMITS.preferWaitSeconds}` });
    }
    return seconds;
  }
  return null;
}

/**
 * Resolves true when the job ends (its terminal event), false after `ms` or when `gone` fires (the client left).
 * `endedAlready` is asked once subscribed, so an end that came before the subscription is not missed.
 */
export function jobEnd(events: EventBus, jobId: string, ms: number, endedAlready: () => boolean, gone: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    let timer: Timer | null = null;
    const finish = (ended: boolean): void => {
      unsubscribe();
      timer?.cancel();
      gone.removeEventListener('abort', onGone);
      resolve(ended);
    };
    const onGone = (): void => finish(false);
    const unsubscribe = events.subscribeJob(jobId, (scoped) => {
      if (TERMINAL_STATUSES.has(scoped.event.type as JobStatus)) finish(true);
    });
    // A request's wait: work in progress, as long as the client waits (the bus's clock; a fake one in tests).
    timer = events.clock.setTimer(ms, () => finish(false));
    gone.addEventListener('abort', onGone, { once: true });
    if (gone.aborted) finish(false);
    else if (endedAlready()) finish(true);
  });
}
