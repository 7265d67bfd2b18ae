import type { FastifyReply } from 'fastify';
import { LIMITS, MeshError, TERMINAL_STATUSES, type JobStatus } from '../../protocol/index.js';
import type { Timer } from '../../protocol/clock.js';
import type { EventBus } from '../events/event-bus.js';

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

/** How a waiting request learns that its client left: `listen` registers what to do then and returns its removal. */
export type Departure = (leave: () => void) => () => void;

/**
 * The client of a request leaving: its connection closed before the answer. The listener is removed when the wait
 * ends, so an answered request — whose response closes too — costs no more than the listener (an AbortController
 * aborted by every response's close built a DOMException, stack and all, per request).
 */
export function clientGone(reply: FastifyReply): Departure {
  const response = reply.raw;
  return (leave) => {
    response.once('close', leave);
    return () => response.off('close', leave);
  };
}

/**
 * Resolves true when the job ends (its terminal event), false after `ms` or when the client leaves (`gone`).
 * `endedAlready` is asked once subscribed, so an end that came before the subscription is not missed.
 */
export function jobEnd(events: EventBus, jobId: string, ms: number, endedAlready: () => boolean, gone: Departure): Promise<boolean> {
  return new Promise((resolve) => {
    let waiting = true;
    const finish = (ended: boolean): void => {
      if (!waiting) return;
      waiting = false;
      unsubscribe();
      timer.cancel();
      stopWatching();
      resolve(ended);
    };
    const unsubscribe = events.subscribeJob(jobId, (scoped) => {
      if (TERMINAL_STATUSES.has(scoped.event.type as JobStatus)) finish(true);
    });
    // A request's wait: work in progress, as long as the client waits (the bus's clock; a fake one in tests).
    const timer: Timer = events.clock.setTimer(ms, () => finish(false));
    const stopWatching = gone(() => finish(false));
    if (endedAlready()) finish(true);
  });
}
