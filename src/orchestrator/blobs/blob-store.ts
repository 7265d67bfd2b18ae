import type { Readable } from 'node:stream';

/** What a store answers after keeping bytes: their digest and size. */
export interface StoredBytes {
  digest: string;
  bytes: number;
}

/**
 * One stored blob, opened: its size and the identity of the bytes behind it as they are now. `BlobReader` checks the
 * size against the recorded one, keeps a verified mark under `signature`, hashes what `chunks` yields, and calls
 * `quarantine` when the bytes do not match; it never needs to know where the bytes live.
 */
export interface BlobHandle {
  readonly digest: string;
  readonly size: number;
  /**
   * What identifies these stored bytes now — a file's stat signature (device, inode, size, mtime, ctime), an object's
   * ETag, size and modification time: bytes replaced or rewritten get another one, so a verified mark of the old ones
   * no longer counts.
   */
  readonly signature: string;
  /**
   * Bytes [start, end) in order, in chunks of at most `chunkBytes` where the store can choose (a file); a store that
   * streams (a bucket) yields what arrives. Bytes that shrank or changed while read are an error.
   */
  chunks(start: number, end: number, chunkBytes: number): AsyncGenerator<Buffer>;
  /**
   * Move these bytes out of the content-addressed names to the store's quarantine, where an operator can inspect
   * them and nothing serves them. Moves nothing when the digest now names other bytes (a fresh upload replaced them)
   * or none (another reader moved them first): then null; otherwise where they went.
   */
  quarantine(now: number): Promise<string | null>;
  /** Release what opening took (a file descriptor); idempotent. */
  close(): Promise<void>;
}

/**
 * Content-addressed bytes by SHA-256 digest. Every implementation verifies on write — bytes are published under
 * their digest only once they are known to hash to it, so nothing partial or corrupt is ever visible under a digest —
 * and hands `BlobReader` what it needs to verify on read. Two implementations: `LocalBlobStore` (a folder, the
 * default) and `S3BlobStore` (an S3-compatible bucket); `openBlobStore` picks one from mesh.yaml's `blobs`.
 */
export interface BlobStore {
  /** Where the bytes live, for the log and the status: a folder or `s3://bucket/prefix`. */
  readonly location: string;

  has(digest: string): Promise<boolean>;

  /** Store bytes already in memory; with `expected`, bytes that hash otherwise are refused (DIGEST_MISMATCH). */
  putBytes(bytes: Uint8Array, expected?: string): Promise<StoredBytes>;

  /**
   * An optional capability: store small bytes (an inline output, 256 KiB at most by default) without leaving the
   * event loop, where the store can (a local folder: a write that small costs less than the thread pool's round
   * trips). A store that cannot be synchronous (a bucket) leaves it out, and callers use `putBytes`.
   */
  putSmallSync?(bytes: Uint8Array, expected: string): void;

  /**
   * Store a stream, hashing as it arrives. With `expected`, a mismatch keeps nothing and throws DIGEST_MISMATCH;
   * past `limit` bytes it throws PAYLOAD_TOO_LARGE, keeping nothing.
   */
  putStream(source: Readable, options?: { expected?: string; limit?: number }): Promise<StoredBytes>;

  /**
   * Take a local file whose bytes are already known to hash to `digest` (a staged upload, hashed as it arrived) into
   * the store; the file is gone afterwards. An existing blob of the digest wins (same bytes).
   */
  adopt(path: string, digest: string): Promise<void>;

  /** Open a blob to read it; null when none is stored under the digest. */
  open(digest: string): Promise<BlobHandle | null>;

  /**
   * The bytes of a blob, or of `[start, end)` of it, not verified: for the orchestrator's own look at what it has just
   * stored (a media type's signature, a picture's header, a model's inputs). Whatever is served goes through
   * `BlobReader`. Null when no such blob is stored.
   */
  read(digest: string, range?: { start: number; end: number }): Promise<Buffer | null>;

  /**
   * An optional capability: the local file that holds a blob (a folder store), for the orchestrator's own look at
   * large bytes — a picture decoded from disk — without reading them into memory or copying them; null when no such
   * blob is stored. A store without local files (a bucket) leaves it out, and callers copy through `open`. Like `read`,
   * not verified.
   */
  localFile?(digest: string): Promise<string | null>;

  /** Delete a blob (one refused after it was stored, that nothing else records); no error when it is not there. */
  remove(digest: string): Promise<void>;

  /**
   * An optional capability: a short-lived URL from which a client reads the blob straight from where it lives (a
   * bucket's presigned GET), answered with these headers. Only a store configured to offer it has it.
   */
  presignedGet?(digest: string, headers: { contentType: string; contentDisposition: string }): Promise<string>;

  /** The newest quarantined copy of `digest` (its name in the store), or null: tells "was corrupt" from "never existed". */
  quarantined(digest: string): Promise<string | null>;
}
