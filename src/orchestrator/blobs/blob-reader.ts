import { createHash } from 'node:crypto';
import { basename } from 'node:path';
import { Readable } from 'node:stream';
import { MeshError } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { BlobHandle, BlobStore } from './blob-store.js';
import { VerifiedMarks } from './verified-marks.js';

/** Bytes `start` to `end` of a blob, both inclusive (as in Content-Range). */
export interface ByteRange {
  start: number;
  end: number;
}

/** What was wrong with a stored blob; given to `onCorrupt`. */
export interface CorruptBlob {
  /** `size`: the file's size differs from the recorded one (caught before a byte was sent); `hash`: its bytes hash to another digest. */
  check: 'size' | 'hash';
  expected: string;
  actual: string;
  /** Where the file was moved; null when moving it failed (then `error` says why). */
  quarantinedTo: string | null;
  error?: string;
}

export interface BlobReaderOptions {
  store: BlobStore;
  clock: Clock;
  /**
   * A stored blob failed its check and was moved to quarantine. Called once per
   * corrupt file (by the request that moved it). The orchestrator wires it to
   * the log, the metric and the event stream.
   */
  onCorrupt: (digest: string, detail: CorruptBlob) => void;
  /** A whole blob was hashed (to serve it, or before serving a range of it); for the metric, and a seam for tests. */
  onHashed?: (digest: string, bytes: number) => void;
  /** How long a verified mark is trusted before the blob is hashed again. Default: one day. */
  reverifyAfterMs?: number;
  /** How many verified marks are kept (least recently served forgotten first). Default: 100,000. */
  maxMarks?: number;
}

/** A stored blob, opened and size-checked; read it or close it. */
export interface OpenBlob {
  readonly size: number;
  /**
   * The bytes, all of them or one range, as a stream that owns the open blob
   * from here on (it closes it when it ends). The whole blob is hashed as it streams,
   * the last chunk held back until the hash matches, and on a mismatch the
   * stream fails, so the transfer breaks short of Content-Length; a range is
   * read only from a blob verified first. Throws INTEGRITY_FAILED instead of
   * returning when the check fails before the first byte (a blob of one chunk,
   * or a range of a blob hashed first); the file is then closed.
   */
  read(range?: ByteRange): Promise<Readable>;
  /** Close without reading (HEAD, 304, 416). */
  close(): Promise<void>;
}

const CHUNK_BYTES = 64 * 1024;
const HASH_CHUNK_BYTES = 1024 * 1024;
const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * Serves stored blobs only when their bytes still hash to their digest.
 * Checks, cheapest first: the stored size (a file's, an object's) against the
 * recorded size, on open; a verified mark (the blob hashed right while its
 * stored bytes had the same signature, see `BlobHandle.signature`), so a hot blob is hashed once, not on every request; otherwise
 * the hash, computed as the bytes go out. A blob that fails is moved to
 * quarantine and reported through `onCorrupt`; later requests for it get
 * INTEGRITY_FAILED instead of NOT_FOUND.
 */
export class BlobReader {
  readonly #store: BlobStore;
  readonly #clock: Clock;
  readonly #onCorrupt: BlobReaderOptions['onCorrupt'];
  readonly #onHashed: NonNullable<BlobReaderOptions['onHashed']>;
  readonly #marks: VerifiedMarks;
  /** Whole-blob hashes in progress, by digest and signature: a video player's burst of range requests hashes once. */
  readonly #hashing = new Map<string, Promise<string>>();

  constructor(options: BlobReaderOptions) {
    this.#store = options.store;
    this.#clock = options.clock;
    this.#onCorrupt = options.onCorrupt;
    this.#onHashed = options.onHashed ?? (() => {});
    this.#marks = new VerifiedMarks({
      clock: options.clock, maxAgeMs: options.reverifyAfterMs ?? DAY_MS, capacity: options.maxMarks ?? 100_000,
    });
  }

  /**
   * Open a stored blob. `recordedBytes` is the size the store recorded when the
   * blob was written (null if none was): a file of another size is corrupt, and
   * is caught here, before any header goes out. Throws NOT_FOUND, or
   * INTEGRITY_FAILED for a blob that is (or was found) corrupt.
   */
  async open(digest: string, recordedBytes: number | null): Promise<OpenBlob> {
    const file = await this.#store.open(digest);
    if (!file) {
      const quarantined = await this.#store.quarantined(digest);
      if (quarantined) {
        throw new MeshError('INTEGRITY_FAILED', { digest, detail: `its stored copy did not match and was moved to quarantine (${basename(quarantined)})` });
      }
      throw new MeshError('NOT_FOUND', { what: `Blob ${digest}` });
    }
    try {
      if (recordedBytes !== null && file.size !== recordedBytes) {
        throw await this.#condemn(file, 'size', `${recordedBytes} bytes`, `${file.size} bytes`);
      }
      return this.#openBlob(file);
    } catch (error) {
      await file.close();
      throw error;
    }
  }

  /** A whole blob's bytes, verified as `open` and `read` verify them (a picture to convert, not a stream to serve). */
  async bytes(digest: string, recordedBytes: number | null): Promise<Buffer> {
    const blob = await this.open(digest, recordedBytes);
    const chunks: Buffer[] = [];
    for await (const chunk of await blob.read()) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  #openBlob(file: BlobHandle): OpenBlob {
    const close = (): Promise<void> => file.close();
    return {
      size: file.size,
      read: async (range) => {
        try {
          const { start, end } = range ?? { start: 0, end: file.size - 1 };
          let chunks: AsyncGenerator<Buffer>;
          if (this.#marks.isCurrent(file.digest, file.signature)) {
            chunks = file.chunks(start, end + 1, CHUNK_BYTES);
          } else if (range) {
            const actual = await this.#hashOnce(file);
            if (actual !== file.digest) throw await this.#condemn(file, 'hash', file.digest, actual);
            chunks = file.chunks(start, end + 1, CHUNK_BYTES);
          } else {
            chunks = this.#verifiedWhileStreaming(file);
          }
          return await primed(chunks, close);
        } catch (error) {
          await close();
          throw error;
        }
      },
      close,
    };
  }

  /**
   * The whole blob, hashed as it goes. The last chunk is held back until the
   * hash is known, so a corrupt blob never reaches the client complete: one of
   * a single chunk fails before any header is sent, a longer one breaks off short.
   */
  async *#verifiedWhileStreaming(file: BlobHandle): AsyncGenerator<Buffer> {
    const hash = createHash('sha256');
    let held: Buffer | null = null;
    for await (const chunk of file.chunks(0, file.size, CHUNK_BYTES)) {
      hash.update(chunk);
      if (held) yield held;
      held = chunk;
    }
    const actual = `sha256:${hash.digest('hex')}`;
    this.#onHashed(file.digest, file.size);
    if (actual !== file.digest) throw await this.#condemn(file, 'hash', file.digest, actual);
    this.#marks.mark(file.digest, file.signature);
    if (held) yield held;
  }

  /** Hash the whole file before serving a range of it; concurrent requests for the same file share one pass. */
  #hashOnce(file: BlobHandle): Promise<string> {
    const key = `${file.digest} ${file.signature}`;
    let pending = this.#hashing.get(key);
    if (!pending) {
      pending = this.#hashWhole(file).finally(() => this.#hashing.delete(key));
      this.#hashing.set(key, pending);
    }
    return pending;
  }

  async #hashWhole(file: BlobHandle): Promise<string> {
    const hash = createHash('sha256');
    for await (const chunk of file.chunks(0, file.size, HASH_CHUNK_BYTES)) hash.update(chunk);
    const actual = `sha256:${hash.digest('hex')}`;
    this.#onHashed(file.digest, file.size);
    if (actual === file.digest) this.#marks.mark(file.digest, file.signature);
    return actual;
  }

  /** Quarantine a corrupt file, report it, and return the error for the request. */
  async #condemn(file: BlobHandle, check: CorruptBlob['check'], expected: string, actual: string): Promise<MeshError> {
    this.#marks.drop(file.digest);
    let quarantinedTo: string | null = null;
    let error: string | undefined;
    try {
      quarantinedTo = await file.quarantine(this.#clock.now());
    } catch (cause) {
      error = String(cause);
    }
    // Null without an error: another request moved this file first (and reported it), or a fresh
    // upload of the same digest replaced it; either way there is nothing more to report.
    if (quarantinedTo !== null || error !== undefined) this.#onCorrupt(file.digest, { check, expected, actual, quarantinedTo, ...(error !== undefined && { error }) });
    const found = check === 'size' ? `its file holds ${actual}, not the ${expected} recorded` : `its bytes hash to ${actual}`;
    const fate = error === undefined ? 'it was moved to quarantine' : 'moving it to quarantine failed (see the orchestrator log)';
    return new MeshError('INTEGRITY_FAILED', { digest: file.digest, detail: `${found}; ${fate}` });
  }
}

/**
 * A stream of `chunks` whose first chunk has already been read: an error
 * before it (a failed check) is thrown here, while the caller can still
 * answer with an error; after it, the stream fails and the caller breaks
 * the response off. `done` runs once the stream is closed, however it ends.
 */
async function primed(chunks: AsyncGenerator<Buffer>, done: () => Promise<void>): Promise<Readable> {
  const first = await chunks.next();
  async function* body(): AsyncGenerator<Buffer> {
    if (first.done) return;
    yield first.value;
    yield* chunks;
  }
  const stream = Readable.from(body(), { objectMode: false, highWaterMark: CHUNK_BYTES });
  // 'close', not a finally in body(): a stream destroyed before its first read never runs body() at all.
  stream.once('close', () => void done().catch(() => {}));
  return stream;
}
