import { systemClock, type Clock, type Timer } from '../../protocol/clock.js';

/**
 * Call `tick` every `ms` on the clock until the returned function is called: the agent's repeating work (the
 * heartbeat, the link's pings, the idle sweep), on whichever clock it was given — a fake one in tests.
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
