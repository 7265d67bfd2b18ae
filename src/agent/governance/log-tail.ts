import type { LogLimits } from './settings.js';

const NEWLINE = 0x0a;

/**
 * The last lines a process wrote to stdout and stderr, for error messages.
 * Bounded in lines, in bytes and per line, so a process that floods its
 * output costs the agent a constant amount of memory: everything is read (the
 * process never blocks on a full pipe) and all but the tail is dropped. While
 * nobody listens for lines, a chunk's lines that would be dropped anyway are
 * skipped without being decoded.
 */
export class LogTail {
  readonly #maxLines: number;
  readonly #maxBytes: number;
  readonly #maxLineBytes: number;
  readonly #lines: string[] = [];
  #bytes = 0;
  readonly #partial = new Map<string, { parts: Buffer[]; bytes: number; truncated: boolean }>();
  #listener: ((line: string) => void) | null = null;
  /** Bytes read from the process, kept or not. */
  bytesSeen = 0;

  constructor(limits: LogLimits, maxLineBytes = 4096) {
    this.#maxLines = limits.lines;
    this.#maxBytes = limits.bytes;
    this.#maxLineBytes = Math.min(maxLineBytes, limits.bytes);
  }

  /** Call `listener` with each complete line from now on (readiness checks); null to stop. */
  onLine(listener: ((line: string) => void) | null): void {
    this.#listener = listener;
  }

  write(stream: string, chunk: Buffer): void {
    this.bytesSeen += chunk.length;
    let start = 0;
    if (!this.#listener) {
      // Only the last maxLines complete lines of this chunk can survive; start after the newline before them.
      let newline = chunk.length;
      let found = 0;
      while (found <= this.#maxLines) {
        newline = newline > 0 ? chunk.lastIndexOf(NEWLINE, newline - 1) : -1;
        if (newline < 0) break;
        found++;
      }
      if (found > this.#maxLines) {
        this.#partial.delete(stream);
        start = newline + 1;
      }
    }
    for (;;) {
      const newline = chunk.indexOf(NEWLINE, start);
      if (newline < 0) {
        if (start < chunk.length) this.#append(stream, chunk.subarray(start));
        return;
      }
      this.#append(stream, chunk.subarray(start, newline));
      this.#finish(stream);
      start = newline + 1;
    }
  }

  /** The kept lines, oldest first; the last `count` of them if given. */
  lines(count?: number): string[] {
    return count === undefined ? [...this.#lines] : this.#lines.slice(-count);
  }

  /** Complete any partial lines (the process has exited). */
  flush(): void {
    for (const stream of [...this.#partial.keys()]) this.#finish(stream);
  }

  #append(stream: string, piece: Buffer): void {
    let partial = this.#partial.get(stream);
    if (!partial) this.#partial.set(stream, (partial = { parts: [], bytes: 0, truncated: false }));
    const room = this.#maxLineBytes - partial.bytes;
    if (room <= 0) {
      partial.truncated = true;
      return;
    }
    // Copy: the chunk's buffer is reused by the stream, and a slice would keep all of it alive.
    const kept = Buffer.from(piece.subarray(0, room));
    partial.parts.push(kept);
    partial.bytes += kept.length;
    if (piece.length > room) partial.truncated = true;
  }

  #finish(stream: string): void {
    const partial = this.#partial.get(stream);
    this.#partial.delete(stream);
    let line = partial ? Buffer.concat(partial.parts).toString('utf8') : '';
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (partial?.truncated) line += ' …';
    this.#listener?.(line);
    this.#lines.push(line);
    this.#bytes += Buffer.byteLength(line);
    while (this.#lines.length > this.#maxLines || (this.#bytes > this.#maxBytes && this.#lines.length > 1)) {
      this.#bytes -= Buffer.byteLength(this.#lines.shift()!);
    }
  }
}
