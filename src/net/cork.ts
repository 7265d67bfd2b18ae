import type { Writable } from 'node:stream';

/**
 * Hold a stream's writes until the current tick's work is done, so messages
 * sent in one tick leave in one write (one syscall, one wake-up of the peer)
 * instead of one each. Call before every write; cheap when already corked.
 */
export function corkForTick(stream: Writable): void {
  if (stream.writableCorked) return;
  stream.cork();
  process.nextTick(() => stream.uncork());
}

/**
 * Release every cork now. Call before ending a stream that may be corked for this tick: Node 22's HTTP response
 * drops what was written while corked when `end()` comes before the uncork (an SSE stream lost its last event, the
 * job's `succeeded`, and closed without it); Node 20's flushed it.
 */
export function uncorkNow(stream: Writable): void {
  while (stream.writableCorked) stream.uncork();
}
