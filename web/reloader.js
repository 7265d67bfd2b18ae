// Reload on demand without a storm, for a page that renders the latest state of something busy (the mesh view).
// No DOM here: it only decides when `reload` runs.

/**
 * A reloader: `request(delayMs)` asks for a reload within `delayMs` (a burst of requests settles into one), but
 * - one reload runs at a time: requests made while it runs fold into one more after it;
 * - two reloads start at least `gapMs` apart, however many requests come;
 * - `start()` adds a slow reload every `everyMs`, for what changes without telling anyone;
 * - `stop()` forgets what was pending.
 * `reload` is async; what it throws goes to `onError`. `now`, `setTimeout`, `clearTimeout`, `setInterval` and
 * `clearInterval` are the clock (a fake one in tests).
 */
export function createReloader({
  reload, onError = () => {}, delayMs = 150, gapMs = 500, everyMs = 15_000,
  now = () => Date.now(), timers = globalThis,
}) {
  let timer = null; // { at, id }: the reload that is due
  let running = false;
  let again = null; // the least delay asked for while a reload ran, or null
  let lastStart = -Infinity;
  let slow = null;
  let active = true;

  async function run() {
    timer = null;
    running = true;
    lastStart = now();
    try {
      await reload();
    } catch (error) {
      onError(error);
    } finally {
      running = false;
      if (again !== null) {
        const delay = again;
        again = null;
        request(delay);
      }
    }
  }

  function request(delay = delayMs) {
    if (!active) return;
    if (running) {
      again = Math.min(again ?? delay, delay);
      return;
    }
    const wait = Math.max(delay, lastStart + gapMs - now());
    // One already due as soon or sooner covers this request.
    if (timer && timer.at <= now() + wait) return;
    if (timer) timers.clearTimeout(timer.id);
    timer = { at: now() + wait, id: timers.setTimeout(run, wait) };
  }

  return {
    request,
    start() {
      active = true;
      if (slow !== null) timers.clearInterval(slow);
      slow = timers.setInterval(() => request(), everyMs);
    },
    stop() {
      active = false;
      if (timer) timers.clearTimeout(timer.id);
      if (slow !== null) timers.clearInterval(slow);
      timer = null;
      slow = null;
      again = null;
    },
  };
}
