import type { BigIntStats } from 'node:fs';
import type { Clock } from '../../protocol/clock.js';
import { keepNewest } from '../../protocol/bounded.js';

/**
 * What a file looked like on disk when it was hashed: device, inode, size,
 * and modification and change times in nanoseconds. Replacing the file changes
 * the inode; writing to it changes mtime and ctime; and ctime also catches a
 * copy that restored the old mtime (`cp -p`, `rsync -t`, `touch -d`), which a
 * user cannot set back.
 */
export function statSignature(stats: BigIntStats): string {
  return `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`;
}

export interface VerifiedMarksOptions {
  clock: Clock;
  /** How long a mark is trusted. Bit rot changes no stat field, so a hot blob is still re-hashed now and then. */
  maxAgeMs: number;
  /** How many blobs are remembered; the least recently served mark is forgotten first. */
  capacity: number;
}

/**
 * Blobs whose bytes hashed to their digest, with the stat signature of the
 * file at that moment, so a hot blob is served without being re-hashed on
 * every request. A mark counts only while the file's signature is unchanged
 * and the mark is younger than `maxAgeMs`. Kept in memory: a restart re-hashes
 * each blob once, the first time it is served.
 */
export class VerifiedMarks {
  readonly #options: VerifiedMarksOptions;
  // A Map iterates in insertion order; re-inserting on each hit makes its first key the least recently used.
  readonly #marks = new Map<string, { signature: string; at: number }>();

  constructor(options: VerifiedMarksOptions) {
    this.#options = options;
  }

  /** Whether `digest` was verified while its file had this signature, recently enough; a stale mark is dropped. */
  isCurrent(digest: string, signature: string): boolean {
    const mark = this.#marks.get(digest);
    if (!mark) return false;
    this.#marks.delete(digest);
    if (mark.signature !== signature || this.#options.clock.now() - mark.at >= this.#options.maxAgeMs) return false;
    this.#marks.set(digest, mark);
    return true;
  }

  mark(digest: string, signature: string): void {
    this.#marks.delete(digest);
    this.#marks.set(digest, { signature, at: this.#options.clock.now() });
    keepNewest(this.#marks, this.#options.capacity);
  }

  drop(digest: string): void {
    this.#marks.delete(digest);
  }

  get size(): number {
    return this.#marks.size;
  }
}
