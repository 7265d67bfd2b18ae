import type { LogLimits } from '../../protocol/engines/process-settings.js';

const NEWLINE = 0x0a;

/** Whether a byte continues a UTF-8 character (10xxxxxx): a cut there would split the character in two. */
const continues = (byte: number | undefined): boolean => byte !== undefined && (byte & 0xc0) === 0x80;

/** The largest index at most `at` where `bytes` can be cut without splitting a character. */
function charBoundary(bytes: Buffer, at: number): number {
  let cut = Math.min(at, bytes.length);
  while (cut > 0 && continues(bytes[cut])) cut--;
  return cut;
}

/**
 * The last lines a process wrote to stdout and stderr, for error messages.
 * Everything is read (the process never blocks on a full pipe) and all but the
 * last `bytes` of complete lines is dropped, so a process that floods its
 * output costs the agent a constant amount of memory and little time: a
 * chunk's complete lines are copied into one ring buffer allocated up front
 * (no allocation per chunk: on a VM, fresh 64 KiB buffers cost page faults
 * that dominate), and split into strings only when someone asks for them —
 * on an error, not per chunk. Lines are ordered by when their newline
 * arrived; a line still without one is held per stream, up to `maxLineBytes`.
 */
export class LogTail {
  readonly #maxLines: number;
  readonly #maxBytes: number;
  readonly #maxLineBytes: number;
  /** Complete lines: `#length` bytes from `#start`, wrapping around; they end with a newline. */
  readonly #ring: Buffer;
  #start = 0;
  #length = 0;
  /** The byte just before the ring's oldest one, once older bytes were overwritten (a newline: the ring starts on a line). */
  #before = NEWLINE;
  readonly #partial = new Map<string, { parts: Buffer[]; bytes: number; truncated: boolean }>();
  #listener: ((line: string) => void) | null = null;
  /** Bytes read from the process, kept or not. */
  bytesSeen = 0;

  constructor(limits: LogLimits, maxLineBytes = 4096) {
    this.#maxLines = limits.lines;
    this.#maxBytes = limits.bytes;
    this.#maxLineBytes = Math.min(maxLineBytes, limits.bytes);
    this.#ring = Buffer.alloc(limits.bytes);
  }

  /** Call `listener` with each complete line from now on (readiness checks); null to stop. */
  onLine(listener: ((line: string) => void) | null): void {
    this.#listener = listener;
  }

  write(stream: string, chunk: Buffer): void {
    this.bytesSeen += chunk.length;
    const last = chunk.lastIndexOf(NEWLINE);
    if (last < 0) {
      this.#append(stream, chunk);
      return;
    }
    const head = this.#takePartial(stream);
    const complete = chunk.subarray(0, last + 1);
    if (this.#listener) this.#notify(head, complete);
    for (const piece of head) this.#keep(piece);
    this.#keep(complete);
    if (last + 1 < chunk.length) this.#append(stream, chunk.subarray(last + 1));
  }

  /** The kept lines, oldest first; the last `count` of them if given. */
  lines(count = this.#maxLines): string[] {
    if (count <= 0) return [];
    const end = this.#start + this.#length;
    const bytes = end <= this.#ring.length
      ? this.#ring.subarray(this.#start, end)
      : Buffer.concat([this.#ring.subarray(this.#start), this.#ring.subarray(0, end - this.#ring.length)]);
    // A ring that starts inside a line starts inside a character too, maybe: from the next whole one.
    let from = 0;
    if (this.#before !== NEWLINE) while (continues(bytes[from])) from++;
    const text = (this.#before === NEWLINE ? '' : '… ') + bytes.subarray(from).toString('utf8');
    const lines = text.split('\n');
    lines.pop(); // after the last newline: nothing
    return lines.slice(-Math.min(count, this.#maxLines)).map((line) => this.#shorten(line.endsWith('\r') ? line.slice(0, -1) : line));
  }

  /** Complete any partial lines (the process has exited). */
  flush(): void {
    for (const stream of [...this.#partial.keys()]) this.write(stream, Buffer.from('\n'));
  }

  #shorten(line: string): string {
    if (Buffer.byteLength(line) <= this.#maxLineBytes) return line;
    const bytes = Buffer.from(line);
    return `${bytes.subarray(0, charBoundary(bytes, this.#maxLineBytes)).toString('utf8')} …`;
  }

  /** Bytes of the stream's unfinished line, up to maxLineBytes (more is dropped and marked). */
  #append(stream: string, piece: Buffer): void {
    let partial = this.#partial.get(stream);
    if (!partial) this.#partial.set(stream, (partial = { parts: [], bytes: 0, truncated: false }));
    // Once cut, the line takes nothing more: a later piece that fits the room left would follow the cut.
    if (partial.truncated) return;
    const room = this.#maxLineBytes - partial.bytes;
    if (piece.length > room) partial.truncated = true;
    if (room <= 0) return;
    // A copy: the stream reuses its buffers, and a slice would keep a whole chunk alive.
    const kept = Buffer.from(piece.subarray(0, piece.length > room ? charBoundary(piece, room) : room));
    partial.parts.push(kept);
    partial.bytes += kept.length;
  }

  #takePartial(stream: string): Buffer[] {
    const partial = this.#partial.get(stream);
    if (!partial) return [];
    this.#partial.delete(stream);
    return partial.truncated ? [...partial.parts, Buffer.from(' …')] : partial.parts;
  }

  #notify(head: Buffer[], complete: Buffer): void {
    let start = 0;
    for (let newline = complete.indexOf(NEWLINE); newline >= 0; newline = complete.indexOf(NEWLINE, start)) {
      const line = start === 0 && head.length > 0 ? Buffer.concat([...head, complete.subarray(0, newline)]) : complete.subarray(start, newline);
      let text = line.toString('utf8');
      if (text.endsWith('\r')) text = text.slice(0, -1);
      this.#listener?.(text);
      start = newline + 1;
    }
  }

  /** Copy bytes into the ring, overwriting the oldest when full. */
  #keep(piece: Buffer): void {
    const capacity = this.#ring.length;
    if (piece.length >= capacity) {
      this.#before = piece.length > capacity ? piece[piece.length - capacity - 1]! : this.#length > 0 ? this.#ring[(this.#start + this.#length - 1) % capacity]! : this.#before;
      piece.copy(this.#ring, 0, piece.length - capacity);
      this.#start = 0;
      this.#length = capacity;
      return;
    }
    const overflow = this.#length + piece.length - capacity;
    if (overflow > 0) {
      this.#before = this.#ring[(this.#start + overflow - 1) % capacity]!;
      this.#start = (this.#start + overflow) % capacity;
      this.#length -= overflow;
    }
    const at = (this.#start + this.#length) % capacity;
    const first = Math.min(piece.length, capacity - at);
    piece.copy(this.#ring, at, 0, first);
    if (first < piece.length) piece.copy(this.#ring, 0, first);
    this.#length += piece.length;
  }
}
