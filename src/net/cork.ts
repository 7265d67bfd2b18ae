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
