import { randomBytes } from 'node:crypto';
import { createReadStream, mkdirSync } from 'node:fs';
import { readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import {
  CopyObjectCommand, DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { assertDigest, MeshError, sha256Digest } from '../../protocol/index.js';
import type { BlobHandle, BlobStore, StoredBytes } from './blob-store.js';
import { spoolHashed } from './spool.js';

export interface S3BlobStoreOptions {
  client: S3Client;
  bucket: string;
  /** Put before every key: "" or ending in "/". */
  prefix: string;
  /** A local folder where streams are written, hashed, before anything is sent (the orchestrator's `<data>/blobs/tmp`). */
  spoolDir: string;
  /**
   * Blobs up to this size go up in one PutObject to a temporary key and are copied to their digest's key; larger ones
   * as a multipart upload straight to it. Default 16 MiB.
   */
  multipartThreshold?: number;
  /** The part size of multipart uploads (S3's minimum is 5 MiB). Default 8 MiB. */
  partSize?: number;
  /** Seconds a client is told to wait (Retry-After) when the bucket is unavailable. Default 5. */
  retryAfterS?: number;
  /** Offer presigned GETs valid this many seconds (`blobs.presign`); absent, reads go through the orchestrator. */
  presignSeconds?: number;
}

/**
 * Blobs in an S3-compatible bucket, keyed `<prefix>sha256/<2 hex>/<64 hex>` like the local folder.
 *
 * Nothing partial or corrupt is ever visible under a digest's key. A stream is first written to a local file and
 * hashed (so its digest is known, checked against the expected one, and a blob already in the bucket is not sent
 * again); then a small blob is put under a temporary key `<prefix>tmp/…` and copied to its digest's key only once the
 * put succeeded whole — some S3-compatible servers (s3rver among them) write an object as its bytes arrive, so a put
 * cut off midway could otherwise leave a partial object under the final key — and a large one goes up as a multipart
 * upload, which no server shows before CompleteMultipartUpload. Reads are verified by `BlobReader` like the local
 * store's: the size from HeadObject against the recorded one, the bytes hashed as they stream out, marks keyed by the
 * object's ETag; a corrupt object is copied to `<prefix>quarantine/sha256-<hex>.<time>` and deleted.
 *
 * A bucket that does not answer (after the SDK's own retries) is BLOB_STORE_UNAVAILABLE (503, Retry-After).
 */
export class S3BlobStore implements BlobStore {
  readonly #client: S3Client;
  readonly #bucket: string;
  readonly #prefix: string;
  readonly #spoolDir: string;
  readonly #threshold: number;
  readonly #partSize: number;
  readonly #retryAfterS: number;

  constructor(options: S3BlobStoreOptions) {
    this.#client = options.client;
    this.#bucket = options.bucket;
    this.#prefix = options.prefix;
    this.#spoolDir = options.spoolDir;
    this.#threshold = options.multipartThreshold ?? 16 * 1024 * 1024;
    this.#partSize = options.partSize ?? 8 * 1024 * 1024;
    this.#retryAfterS = options.retryAfterS ?? 5;
    mkdirSync(this.#spoolDir, { recursive: true });
    const seconds = options.presignSeconds;
    if (seconds !== undefined) {
      this.presignedGet = (digest, headers) => getSignedUrl(this.#client, new GetObjectCommand({
        Bucket: this.#bucket, Key: this.keyOf(digest), ResponseContentType: headers.contentType, ResponseContentDisposition: headers.contentDisposition,
      }), { expiresIn: seconds });
    }
  }

  /**
   * A presigned GET of the blob's object, valid `presignSeconds`, answered with the headers the orchestrator would
   * send (its type, inline or as a download): the client reads from the bucket's origin, never from ours.
   */
  readonly presignedGet?: (digest: string, headers: { contentType: string; contentDisposition: string }) => Promise<string>;

  get location(): string {
    return `s3://${this.#bucket}/${this.#prefix}`;
  }

  /** The object key of a blob. */
  keyOf(digest: string): string {
    const hex = assertDigest(digest).slice('sha256:'.length);
    return `${this.#prefix}sha256/${hex.slice(0, 2)}/${hex}`;
  }

  async has(digest: string): Promise<boolean> {
    return (await this.#head(this.keyOf(digest), 'look for a blob')) !== null;
  }

  async putBytes(bytes: Uint8Array, expected?: string): Promise<StoredBytes> {
    const digest = sha256Digest(bytes);
    if (expected !== undefined && expected !== digest) throw new MeshError('DIGEST_MISMATCH', { expected, actual: digest });
    if (!(await this.has(digest))) await this.#putSmall(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), digest);
    return { digest, bytes: bytes.length };
  }

  // No putSmallSync: a request to a bucket cannot be synchronous; callers use putBytes.

  async putStream(source: Readable, options: { expected?: string; limit?: number } = {}): Promise<StoredBytes> {
    const temp = this.#spoolPath();
    try {
      const stored = await spoolHashed(source, temp, options);
      if (!(await this.has(stored.digest))) await this.#publishFile(temp, stored);
      return stored;
    } finally {
      await rm(temp, { force: true });
    }
  }

  async adopt(path: string, digest: string): Promise<void> {
    // On a failure the file stays where it is: completing the upload again, once the bucket is back, sends it.
    if (!(await this.has(digest))) await this.#publishFile(path, { digest, bytes: (await stat(path)).size });
    await rm(path, { force: true });
  }

  async open(digest: string): Promise<BlobHandle | null> {
    const key = this.keyOf(digest);
    const head = await this.#head(key, 'open a blob');
    if (!head) return null;
    return new S3BlobHandle(this, digest, key, head.size, head.etag, `${head.etag}:${head.size}:${head.modified}`);
  }

  async read(digest: string, range?: { start: number; end: number }): Promise<Buffer | null> {
    let wanted = range;
    if (range) {
      // The size first: a range is clamped to it, and none is asked of an empty object (servers differ there: S3
      // answers 416, s3rver never answers).
      const head = await this.#head(this.keyOf(digest), 'read a blob');
      if (!head) return null;
      wanted = { start: range.start, end: Math.min(range.end, head.size) };
      if (wanted.end <= wanted.start) return Buffer.alloc(0);
    }
    try {
      const answer = await this.#client.send(new GetObjectCommand({
        Bucket: this.#bucket, Key: this.keyOf(digest), ...(wanted && { Range: `bytes=${wanted.start}-${wanted.end - 1}` }),
      }));
      return Buffer.from(await answer.Body!.transformToByteArray());
    } catch (error) {
      if (isNotFound(error)) return null;
      throw this.unavailable(error, 'read a blob');
    }
  }

  async remove(digest: string): Promise<void> {
    await this.#send(() => this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: this.keyOf(digest) })), 'delete a blob');
  }

  async quarantined(digest: string): Promise<string | null> {
    const prefix = `${this.#prefix}quarantine/${assertDigest(digest).replace(':', '-')}.`;
    const listed = await this.#send(() => this.#client.send(new ListObjectsV2Command({ Bucket: this.#bucket, Prefix: prefix })), 'list the quarantine');
    const newest = (listed.Contents ?? []).map((object) => object.Key!).sort().at(-1);
    return newest === undefined ? null : `s3://${this.#bucket}/${newest}`;
  }

  /** The bytes of `key` from `start` to `end` (exclusive), as they stream; only while the object is still `etag`. */
  async *chunksOf(digest: string, key: string, etag: string, start: number, end: number): AsyncGenerator<Buffer> {
    if (start >= end) return;
    let body: AsyncIterable<Buffer>;
    try {
      const answer = await this.#client.send(new GetObjectCommand({ Bucket: this.#bucket, Key: key, Range: `bytes=${start}-${end - 1}`, IfMatch: etag }));
      body = answer.Body as unknown as AsyncIterable<Buffer>;
    } catch (error) {
      if (isNotFound(error) || statusOf(error) === 412) {
        throw new MeshError('INTEGRITY_FAILED', { digest, detail: 'its object was replaced or deleted while it was read' });
      }
      throw this.unavailable(error, 'read a blob');
    }
    let position = start;
    try {
      for await (const chunk of body) {
        position += chunk.length;
        yield chunk;
      }
    } catch (error) {
      throw this.unavailable(error, `read a blob (the transfer broke off at byte ${position})`);
    }
    if (position !== end) throw new MeshError('INTEGRITY_FAILED', { digest, detail: `its object ended at byte ${position} of ${end} while it was read` });
  }

  /**
   * Copy the object to the quarantine and delete it, if `key` still holds the object found corrupt (`etag`). The copy
   * is conditional on the ETag; the delete that follows is not (not every S3-compatible server has conditional
   * deletes), so a fresh upload of the same digest landing between the two would be deleted too — and uploaded
   * again by its next writer, since a missing blob is simply stored anew.
   */
  async quarantineObject(digest: string, key: string, etag: string, now: number): Promise<string | null> {
    const head = await this.#head(key, 'quarantine a blob');
    if (!head || head.etag !== etag) return null;
    const target = `${this.#prefix}quarantine/${assertDigest(digest).replace(':', '-')}.${new Date(now).toISOString().replaceAll(':', '-')}`;
    try {
      await this.#client.send(new CopyObjectCommand({
        Bucket: this.#bucket, Key: target, CopySource: copySource(this.#bucket, key), CopySourceIfMatch: etag,
      }));
    } catch (error) {
      if (isNotFound(error) || statusOf(error) === 412) return null;
      throw this.unavailable(error, 'quarantine a blob');
    }
    await this.#send(() => this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: key })), 'quarantine a blob');
    return `s3://${this.#bucket}/${target}`;
  }

  /** An S3 failure as the error a client gets: 503 with Retry-After, naming what was being done and the S3 error. */
  unavailable(error: unknown, doing: string): MeshError {
    if (error instanceof MeshError) return error;
    const named = error as { name?: string; message?: string; code?: string };
    const what = [named.name, named.code].filter((part) => part && part !== 'Error').join(' ');
    const detail = `${doing}: ${what ? `${what}: ` : ''}${named.message ?? String(error)}`.slice(0, 500);
    return new MeshError('BLOB_STORE_UNAVAILABLE', { store: this.location, detail, retryAfter: this.#retryAfterS }, {
      cause: error, headers: { 'retry-after': String(this.#retryAfterS) },
    });
  }

  /** A verified spooled file under its digest: small ones through a temporary key, large ones by multipart. */
  async #publishFile(path: string, stored: StoredBytes): Promise<void> {
    if (stored.bytes <= this.#threshold) {
      await this.#putSmall(await readFile(path), stored.digest);
      return;
    }
    const upload = new Upload({
      client: this.#client,
      params: { Bucket: this.#bucket, Key: this.keyOf(stored.digest), Body: createReadStream(path), ContentLength: stored.bytes },
      partSize: this.#partSize,
      queueSize: 4,
      // A failed upload is aborted, so its parts never become an object.
      leavePartsOnError: false,
    });
    try {
      await upload.done();
    } catch (error) {
      throw this.unavailable(error, `upload ${stored.digest} (multipart)`);
    }
  }

  /**
   * Put the bytes under a temporary key, then copy them to the digest's key: the key gets the object only once the
   * put has succeeded whole. The SDK replays a Buffer body on its retries. A temporary object left behind by a
   * failed delete is harmless (docs/operations.md suggests a lifecycle rule for `<prefix>tmp/`).
   */
  async #putSmall(bytes: Buffer, digest: string): Promise<void> {
    const temp = `${this.#prefix}tmp/${process.pid}-${randomBytes(8).toString('hex')}`;
    await this.#send(() => this.#client.send(new PutObjectCommand({ Bucket: this.#bucket, Key: temp, Body: bytes, ContentLength: bytes.length })), `upload ${digest}`);
    try {
      await this.#send(() => this.#client.send(new CopyObjectCommand({ Bucket: this.#bucket, Key: this.keyOf(digest), CopySource: copySource(this.#bucket, temp) })), `publish ${digest}`);
    } finally {
      await this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: temp })).catch(() => {});
    }
  }

  async #head(key: string, doing: string): Promise<{ size: number; etag: string; modified: number } | null> {
    try {
      const head = await this.#client.send(new HeadObjectCommand({ Bucket: this.#bucket, Key: key }));
      return { size: head.ContentLength ?? 0, etag: head.ETag ?? '', modified: head.LastModified?.getTime() ?? 0 };
    } catch (error) {
      if (isNotFound(error)) return null;
      throw this.unavailable(error, doing);
    }
  }

  async #send<Output>(request: () => Promise<Output>, doing: string): Promise<Output> {
    try {
      return await request();
    } catch (error) {
      throw this.unavailable(error, doing);
    }
  }

  #spoolPath(): string {
    return join(this.#spoolDir, `${process.pid}-${randomBytes(8).toString('hex')}`);
  }
}

/** One object, opened by HeadObject: its reads are conditional on the ETag it had then. */
class S3BlobHandle implements BlobHandle {
  constructor(
    private readonly store: S3BlobStore,
    readonly digest: string,
    private readonly key: string,
    readonly size: number,
    private readonly etag: string,
    readonly signature: string,
  ) {}

  chunks(start: number, end: number): AsyncGenerator<Buffer> {
    return this.store.chunksOf(this.digest, this.key, this.etag, start, end);
  }

  quarantine(now: number): Promise<string | null> {
    return this.store.quarantineObject(this.digest, this.key, this.etag, now);
  }

  /** Nothing is held open between requests. */
  async close(): Promise<void> {}
}

/** CopySource is `bucket/key`, URL-encoded (keys here are plain, but the rule is S3's). */
function copySource(bucket: string, key: string): string {
  return `${bucket}/${key.split('/').map(encodeURIComponent).join('/')}`;
}

function statusOf(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
}

function isNotFound(error: unknown): boolean {
  const name = (error as { name?: string }).name;
  return name === 'NotFound' || name === 'NoSuchKey' || statusOf(error) === 404;
}
