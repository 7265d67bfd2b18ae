import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { MeshError, picturesIn } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import { LRUCache } from 'lru-cache';
import type { Commits, ImageVerdict, MeshStore } from '../store/index.js';
import type { BlobStore } from './blob-store.js';
import { checkPicture, declaredMismatch, type DeclaredType } from './picture-check.js';

export interface InputImagesDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  blobs: BlobStore;
  /**
   * Where a stored blob is copied to be decoded when its store keeps no local file of it (a bucket): pictures are
   * judged from a file, never from memory. Default: the system's temporary folder.
   */
  scratchDir?: string;
}

/** Bytes copied at a time from a store that keeps no local file. */
const COPY_CHUNK_BYTES = 1024 * 1024;

/** The digests of the pictures an input names (its `image`, `mask`, a workflow's `pictures`), whatever else it holds. */
export function picturesNamed(input: unknown): string[] {
  return picturesIn(input).map((picture) => picture.digest);
}

/**
 * Pictures jobs start from, by digest: each is decoded once (picture-check.ts) and its verdict kept, so admission —
 * which is synchronous, many jobs in one commit — reads a verdict instead of decoding; a bomb is refused by its
 * header once, not once per job that names it. Verdicts are kept in the store and, once read, in memory: a digest's
 * verdict never changes, and admission reads them without waiting for the store.
 */
export class InputImages {
  readonly #deps: InputImagesDeps;
  readonly #verdicts = new LRUCache<string, ImageVerdict>({ max: 10_000 });

  constructor(deps: InputImagesDeps) {
    this.#deps = deps;
  }

  /**
   * Decode a stored blob (once per digest: the verdict of its bytes is kept) and hold it to what the client declared
   * for it; undefined when no such blob is stored.
   */
  async inspect(digest: string, declared: DeclaredType = {}): Promise<ImageVerdict | undefined> {
    const { store, commits, clock, blobs } = this.#deps;
    const known = await this.#known(digest);
    if (known) return this.#held(digest, known, declared);
    const decided = await this.#withFile(digest, (path) => this.#decide(digest, path));
    if (!decided) return undefined;
    commits.write(() => store.inputImages.recordVerdict(digest, decided, clock.now()));
    return this.#held(digest, decided, declared);
  }

  /**
   * Decode a file a request carries that is not stored yet (a client's file in hand at `path`, judged before it is
   * kept): the verdict is kept in memory only, so a refused picture leaves nothing in the store; `keep` writes it once
   * the bytes are stored.
   */
  async judge(digest: string, path: string, declared: DeclaredType = {}): Promise<ImageVerdict> {
    const verdict = await this.#known(digest) ?? await this.#decide(digest, path);
    return this.#held(digest, verdict, declared);
  }

  /** Record the verdict `judge` gave a picture now stored (call inside `commits.write`), so a restart need not decode it again. */
  keep(digest: string): void {
    const verdict = this.#verdicts.get(digest);
    if (verdict) this.#deps.store.inputImages.recordVerdict(digest, verdict, this.#deps.clock.now());
  }

  /**
   * The picture's bytes left the store (inside `commits.write`): its verdict goes, here and in the store, so admission
   * — which takes a verdict as the sign that the picture is there — refuses a job that names it.
   */
  forget(digest: string): void {
    this.#verdicts.delete(digest);
    this.#deps.store.inputImages.forgetVerdict(digest);
  }

  /** The verdict already reached for a digest (in memory, else in the store), or undefined. */
  async #known(digest: string): Promise<ImageVerdict | undefined> {
    return this.#verdicts.get(digest) ?? await this.#deps.store.inputImages.verdictOf(digest);
  }

  async #decide(digest: string, path: string): Promise<ImageVerdict> {
    const verdict = await checkPicture(path);
    this.#verdicts.set(digest, verdict);
    return verdict;
  }

  /**
   * Run `use` on a local file holding a stored blob's bytes: the store's own file where it keeps one (a folder), else
   * a copy streamed into the scratch folder and removed after. Undefined when no such blob is stored.
   */
  async #withFile<T>(digest: string, use: (path: string) => Promise<T>): Promise<T | undefined> {
    const { blobs, scratchDir = tmpdir() } = this.#deps;
    if (blobs.localFile) {
      const path = await blobs.localFile(digest);
      return path === null ? undefined : use(path);
    }
    const handle = await blobs.open(digest);
    if (!handle) return undefined;
    const path = join(scratchDir, `${process.pid}-${randomBytes(8).toString('hex')}.picture`);
    try {
      await mkdir(scratchDir, { recursive: true });
      await pipeline(Readable.from(handle.chunks(0, handle.size, COPY_CHUNK_BYTES)), createWriteStream(path));
      return await use(path);
    } finally {
      await handle.close();
      await rm(path, { force: true });
    }
  }

  /** A verdict, remembered, as it stands for what the client declared: a wrong declared type is this request's mistake, not the file's, and is not kept. */
  #held(digest: string, verdict: ImageVerdict, declared: DeclaredType): ImageVerdict {
    this.#verdicts.set(digest, verdict);
    const mismatch = verdict.ok ? declaredMismatch(verdict.format, declared) : null;
    return mismatch ? { ok: false, refusal: mismatch } : verdict;
  }

  /**
   * Before admission: every picture in `digests` (those an input names that the grant may read) has its verdict in
   * memory (read from the store, or decoding what was never decoded). Null, at once, when there is nothing to do —
   * most jobs name no picture, and a submit should not wait a turn for nothing.
   */
  prepare(digests: readonly string[]): Promise<void> | null {
    const undecided = digests.filter((digest) => /^sha256:[0-9a-f]{64}$/.test(digest) && !this.#verdicts.has(digest));
    if (undecided.length === 0) return null;
    return (async () => {
      for (const digest of undecided) await this.inspect(digest);
    })();
  }

  /** A picture's size, if it decoded (admission's `PictureSizes`). */
  sizeOf(digest: string): { width: number; height: number } | null {
    const verdict = this.#verdicts.get(digest);
    return verdict?.ok ? { width: verdict.width, height: verdict.height } : null;
  }

  /**
   * At admission: each picture a normalized input names exists, may be read by the grant (`visible` throws
   * otherwise) and decoded; a 400 naming the field when not.
   */
  check(input: Record<string, unknown>, model: string, visible: (digest: string) => void): void {
    for (const { field, digest } of picturesIn(input)) {
      try {
        visible(digest);
      } catch (error) {
        if (error instanceof MeshError && error.code === 'NOT_FOUND') {
          throw new MeshError('INVALID_INPUT', { model, detail: `${field}: no blob ${digest} that this grant may read (store the picture with PUT /v1/blobs first)` });
        }
        throw error;
      }
      const verdict = this.#verdicts.get(digest);
      if (!verdict) throw new MeshError('INVALID_INPUT', { model, detail: `${field}: no blob ${digest} is stored (store the picture with PUT /v1/blobs first)` });
      if (!verdict.ok) throw new MeshError('IMAGE_REFUSED', { detail: `${field} ${digest}: ${verdict.refusal}` });
    }
  }

  /** Record which pictures a job names, so the host it runs on may read them. */
  recordJob(jobId: string, input: Record<string, unknown>): void {
    const digests = picturesNamed(input);
    if (digests.length === 0) return;
    this.#deps.commits.write(() => { for (const digest of digests) this.#deps.store.inputImages.recordJobInput(digest, jobId); });
  }
}
