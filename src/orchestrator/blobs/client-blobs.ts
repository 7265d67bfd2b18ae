import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { fileTypeFromBuffer } from 'file-type';
import type { StoredBlob } from '../../protocol/api/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { Commits, MeshStore } from '../store/index.js';
import type { BlobStore } from './blob-store.js';
import type { DigestLocks } from './digest-locks.js';
import type { BlobReclaimer, Reclaimed } from './reclaim.js';
import type { InputImages } from './input-images.js';
import type { DeclaredType } from './picture-check.js';
import { spoolHashed } from './spool.js';
import { MeshError } from '../../protocol/index.js';

export interface ClientBlobsDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  blobs: BlobStore;
  /** The largest blob a client may store in one request. */
  limitBytes: number;
  /** Pictures are decoded before they are stored, so a bad one is refused then — and never stored — not when a job names it. */
  pictures: InputImages;
  /**
   * Where a client's file is hashed to disk before it is judged and stored: on the blob folder's filesystem, so that
   * keeping it is a rename. Emptied at start (what is there was left by requests the process did not finish).
   */
  incomingDir: string;
  /** The locks every writer that stores, records or removes a digest takes (shared with outputs and reclaiming). */
  locks: DigestLocks;
  /** Gives back the bytes of a file a client deleted, once nothing else names them. */
  reclaimer: BlobReclaimer;
}

/** A client's file in hand: hashed into a local file, judged or not, not (yet) in the store. */
export interface Incoming {
  path: string;
  digest: string;
  bytes: number;
}

/**
 * Pictures a request carries itself (an OpenAI edit), received and judged but not stored, for `JobAdmission.submitAll`:
 * `store` puts their bytes in the store once every check of the request has passed — the jobs name them, so their
 * host must find them — and then either `admitted` records them as the caller's in the jobs' own turn, or `refused`
 * (a refusal a concurrent request brought about while they were stored: a queue that filled) takes back the bytes
 * that were not stored before this request. One of the two, once.
 */
export interface CarriedPictures {
  readonly digests: readonly string[];
  store(): Promise<{ admitted(): void; refused(): Promise<void> }>;
}

/** Bytes read to tell a blob's media type by its signature. */
const SNIFF_BYTES = 4100;

/**
 * Files clients store by digest (`PUT /v1/blobs`, a resumable upload completed, an OpenAI edit's pictures): an image
 * to start from, a model file to register. Each is judged before it is stored — its media type as its bytes say (a
 * declared type is not believed), a picture decoded under limits — so a refused file never reaches the store, and is
 * recorded with the grant lineage that stored it, so jobs of that lineage may name it as an input (`"image":
 * "sha256:…"`) and read it back; the same bytes stored twice are one blob.
 *
 * Storing and recording one digest is done under that digest's lock (`DigestLocks`, shared with the outputs of jobs
 * and with reclaiming): a request that takes back bytes it stored (`CarriedPictures.refused`) then knows nothing else
 * stored, recorded or removed the same bytes in between.
 */
export class ClientBlobs {
  readonly #deps: ClientBlobsDeps;

  constructor(deps: ClientBlobsDeps) {
    this.#deps = deps;
    rmSync(deps.incomingDir, { recursive: true, force: true });
    mkdirSync(deps.incomingDir, { recursive: true });
  }

  /** Store a stream (hashed as it is written, refused past the limit), once judged. */
  async put(grantId: string, body: Readable, declared: DeclaredType = {}): Promise<StoredBlob> {
    const incoming = await this.receive(body);
    try {
      return await this.take(grantId, incoming, declared);
    } finally {
      await this.discard(incoming);
    }
  }

  /** Hash a client's file into a local file (PAYLOAD_TOO_LARGE past the limit); nothing is stored. `discard` it when done. */
  async receive(body: Readable): Promise<Incoming> {
    const path = join(this.#deps.incomingDir, `${process.pid}-${randomBytes(8).toString('hex')}`);
    try {
      return { path, ...await spoolHashed(body, path, { limit: this.#deps.limitBytes }) };
    } catch (error) {
      await rm(path, { force: true });
      throw error;
    }
  }

  /** Remove a file in hand (nothing, once the store has taken it). */
  async discard(incoming: Incoming): Promise<void> {
    await rm(incoming.path, { force: true });
  }

  /**
   * Judge a file in hand, writing nothing: its media type (as its bytes say, or as recorded when the digest is stored
   * already), and — when that is a picture type, when the client declared one, or when `picture` says it must be one —
   * that it decodes and agrees with what was declared (IMAGE_REFUSED otherwise).
   */
  async judge(incoming: Incoming, declared: DeclaredType = {}, picture = false): Promise<string> {
    const known = await this.#deps.store.blobs.getBlob(incoming.digest);
    const mediaType = known?.mediaType ?? await sniff(incoming.path);
    if (picture || mediaType.startsWith('image/') || declared.mediaType?.startsWith('image/')) {
      const verdict = await this.#deps.pictures.judge(incoming.digest, incoming.path, declared);
      if (!verdict.ok) throw new MeshError('IMAGE_REFUSED', { detail: verdict.refusal });
    }
    return mediaType;
  }

  /**
   * Judge a file in hand and, if it is accepted, store it and record it as this lineage's; resolves once committed.
   * A refused file is not stored (the caller discards it).
   */
  async take(grantId: string, incoming: Incoming, declared: DeclaredType = {}): Promise<StoredBlob> {
    const mediaType = await this.judge(incoming, declared);
    const release = await this.#deps.locks.lock(incoming.digest);
    try {
      await this.#deps.blobs.adopt(incoming.path, incoming.digest);
      this.#deps.commits.write(() => this.#record(grantId, incoming, mediaType));
    } finally {
      // Reads see every write made before them: the next request of this digest finds the record, committed or not.
      release();
    }
    await this.#deps.commits.durable();
    return { digest: incoming.digest, bytes: incoming.bytes, mediaType };
  }

  /** Pictures a request carries, each received and judged (`mediaType` as `judge` answered): see CarriedPictures. */
  carry(grantId: string, pictures: readonly { incoming: Incoming; mediaType: string }[]): CarriedPictures {
    // One lock per digest, taken in digest order: the same picture twice in a request, or two requests carrying the
    // same two pictures, never wait on themselves or on each other.
    const unique = [...new Map(pictures.map((picture) => [picture.incoming.digest, picture])).values()]
      .sort((a, b) => (a.incoming.digest < b.incoming.digest ? -1 : 1));
    return {
      digests: unique.map((picture) => picture.incoming.digest),
      store: async () => {
        const releases: (() => void)[] = [];
        const fresh: string[] = [];
        let settled = false;
        const settle = (): void => {
          settled = true;
          for (const release of releases) release();
        };
        try {
          for (const { incoming } of unique) {
            releases.push(await this.#deps.locks.lock(incoming.digest));
            if (!(await this.#deps.blobs.has(incoming.digest))) fresh.push(incoming.digest);
            await this.#deps.blobs.adopt(incoming.path, incoming.digest);
          }
        } catch (error) {
          try {
            await this.#giveBack(fresh);
          } finally {
            settle();
          }
          throw error;
        }
        return {
          admitted: () => {
            if (settled) return;
            try {
              this.#deps.commits.write(() => { for (const { incoming, mediaType } of unique) this.#record(grantId, incoming, mediaType); });
            } finally {
              settle();
            }
          },
          refused: async () => {
            if (settled) return;
            try {
              await this.#giveBack(fresh);
            } finally {
              settle();
            }
          },
        };
      },
    };
  }

  /**
   * A lineage deletes a file it stored: it may no longer name it or read it back by that right, and the bytes go
   * once nothing else names them (another lineage's copy, a job that took it as its input, a result of the same
   * bytes). NOT_FOUND when this lineage did not store it.
   */
  async forget(grantId: string, digest: string): Promise<Reclaimed> {
    if (!(await this.storedBy(digest, grantId))) throw new MeshError('NOT_FOUND', { what: `A file ${digest} stored by this grant` });
    this.#deps.commits.writeOne(() => this.#deps.store.clientBlobs.forgetClientBlob(digest, grantId));
    await this.#deps.commits.durable();
    return this.#deps.reclaimer.release([digest]);
  }

  /** Whether grants of this lineage stored the blob. */
  storedBy(digest: string, grantId: string): Promise<boolean> {
    return this.#deps.store.clientBlobs.storedBy(digest, grantId);
  }

  /** The rows of a stored client file (inside `commits.write`): the blob, its lineage, a picture's verdict. */
  #record(grantId: string, stored: { digest: string; bytes: number }, mediaType: string): void {
    const { store, clock, pictures } = this.#deps;
    const now = clock.now();
    store.blobs.recordBlob({ digest: stored.digest, bytes: stored.bytes, mediaType }, now);
    store.clientBlobs.recordClientBlob(stored.digest, grantId, now);
    pictures.keep(stored.digest);
  }

  /**
   * Delete what a refused request stored (`fresh`: digests not in the store before it, still under its locks) unless
   * something records them by now.
   */
  async #giveBack(fresh: readonly string[]): Promise<void> {
    for (const digest of fresh) {
      if (!(await this.#deps.store.blobs.getBlob(digest))) await this.#deps.blobs.remove(digest);
    }
  }
}

/** A file's media type by the signature in its first bytes. */
async function sniff(path: string): Promise<string> {
  const file = await open(path, 'r');
  try {
    const head = Buffer.alloc(SNIFF_BYTES);
    const { bytesRead } = await file.read(head, 0, SNIFF_BYTES, 0);
    return (await fileTypeFromBuffer(head.subarray(0, bytesRead)))?.mime ?? 'application/octet-stream';
  } finally {
    await file.close();
  }
}
