/**
 * Time, behind one interface both sides use, so schedulers, leases, backoffs, deadlines and watchdogs are tested
 * with a fake clock (test/helpers/fake-clock.ts) and no sleeps.
 */
export interface Timer {
  cancel(): void;
}

export interface Clock {
  now(): number;
  setTimer(ms: number, fn: () => void): Timer;
}

/** Real time, with timers that do not keep the process alive: background timers (sweeps, idle windows, backoffs). */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const handle = setTimeout(fn, Math.max(0, ms));
    handle.unref?.();
    return { cancel: () => clearTimeout(handle) };
  },
};

/**
 * Real time, with timers that keep the process alive: a job waiting between two polls of a server is work in
 * progress, and must not let a process that has nothing else to do exit under it.
 */
export const workClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const handle = setTimeout(fn, Math.max(0, ms));
    return { cancel: () => clearTimeout(handle) };
  },
};

/** Wait on the clock; rejects with the signal's reason as soon as it aborts. */
export function sleep(clock: Clock, ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      timer.cancel();
      reject(signal.reason);
    };
    const timer = clock.setTimer(ms, () => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    });
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
