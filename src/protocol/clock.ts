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

/**
 * Call `tick` every `ms` on the clock until the returned function is called: repeating work (the agent's
 * heartbeat and pings, an event stream's keepalive), on whichever clock it was given — a fake one in tests.
 */
export function every(clock: Clock, ms: number, tick: () => void): () => void {
  let timer: Timer | null = null;
  let stopped = false;
  const arm = (): void => {
    timer = clock.setTimer(ms, () => {
      if (stopped) return;
      arm();
      tick();
    });
  };
  arm();
  return () => {
    stopped = true;
    timer?.cancel();
  };
}

/**
 * Resolves with null after `ms` on the clock: the other side of a race with something that should happen within a
 * moment (a process's exit after its pipe broke). Default real time, on a timer that does not keep the process alive.
 */
export function moment(ms: number, clock: Clock = systemClock): Promise<null> {
  return new Promise((resolve) => clock.setTimer(ms, () => resolve(null)));
}
