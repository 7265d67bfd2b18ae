import type { Readable } from 'node:stream';
import { fileTypeFromBuffer } from 'file-type';
import type { Clock } from '../../protocol/clock.js';
import type { Commits, MeshStore } from '../store/index.js';
import type { BlobStore } from './blob-store.js';
import type { InputImages } from './input-images.js';
import type { DeclaredType } from './picture-check.js';
import { MeshError } from '../../protocol/index.js';

export interface ClientBlobsDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  blobs: BlobStore;
  /** The largest blob a client may store in one request. */
  limitBytes: number;
  /** Pictures are decoded when they are stored, so a bad one is refused then, not when a job names it. */
  pictures: InputImages;
}

/** What a client learns of a blob it stored. */
export interface StoredBlob {
  digest: string;
  bytes: number;
  mediaType: string;
}

/** Bytes read to tell a blob's media type by its signature. */
const SNIFF_BYTES = 4100;

/**
 * Files clients store by digest (`PUT /v1/blobs`, or a resumable upload completed): an image to start from, a model
 * file to register. Each is recorded with its media type as its bytes say (a declared type is not believed) and with
 * the grant lineage that stored it, so jobs of that lineage may name it as an input (`"image": "sha256:…"`) and read
 * it back; the same bytes stored twice are one blob.
 */
export class ClientBlobs {
  readonly #deps: ClientBlobsDeps;

  constructor(deps: ClientBlobsDeps) {
    this.#deps = deps;
  }

  /** Store a stream (hashed as it is written, refused past the limit). */
  async put(grantId: string, body: Readable, declared: DeclaredType = {}): Promise<StoredBlob> {
    const stored = await this.#deps.blobs.putStream(body, { limit: this.#deps.limitBytes });
    return this.record(grantId, stored, declared);
  }

  /**
   * Record a blob already in the store (a completed upload) as this lineage's. A picture (by its bytes or as
   * declared) must decode (IMAGE_REFUSED otherwise, and the bytes are not kept unless something else holds them).
   */
  async record(grantId: string, stored: { digest: string; bytes: number }, declared: DeclaredType = {}): Promise<StoredBlob> {
    const { store, commits, clock } = this.#deps;
    const known = await store.blobs.getBlob(stored.digest);
    const mediaType = known?.mediaType ?? await this.#sniff(stored.digest);
    if (mediaType.startsWith('image/') || declared.mediaType?.startsWith('image/')) {
      const verdict = await this.#deps.pictures.inspect(stored.digest, declared);
      if (verdict && !verdict.ok) {
        if (!known) await this.#deps.blobs.remove(stored.digest);
        throw new MeshError('IMAGE_REFUSED', { detail: verdict.refusal });
      }
    }
    const now = clock.now();
    commits.write(() => {
      store.blobs.recordBlob({ digest: stored.digest, bytes: stored.bytes, mediaType }, now);
      store.clientBlobs.recordClientBlob(stored.digest, grantId, now);
    });
    await commits.durable();
    return { digest: stored.digest, bytes: stored.bytes, mediaType };
  }

  /** Whether grants of this lineage stored the blob. */
  storedBy(digest: string, grantId: string): Promise<boolean> {
    return this.#deps.store.clientBlobs.storedBy(digest, grantId);
  }

  async #sniff(digest: string): Promise<string> {
    const head = await this.#deps.blobs.read(digest, { start: 0, end: SNIFF_BYTES });
    if (!head) throw new MeshError('NOT_FOUND', { what: `Blob ${digest}` });
    return (await fileTypeFromBuffer(head))?.mime ?? 'application/octet-stream';
  }
}
