/**
 * Time for governance timers (restart backoff, idle stop, readiness deadlines).
 * The same shape as the orchestrator's clock, so its `FakeClock` drives these
 * timers in tests; declared here so the agent does not import the orchestrator.
 */
export interface Timer {
  cancel(): void;
}

export interface Clock {
  now(): number;
  setTimer(ms: number, fn: () => void): Timer;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const handle = setTimeout(fn, Math.max(0, ms));
    handle.unref?.();
    return { cancel: () => clearTimeout(handle) };
  },
};
