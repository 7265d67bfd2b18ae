import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import sharp from 'sharp';
import { MeshError } from '../../protocol/index.js';

/** The widths a thumbnail may have: a card (1× and 2×) and a large preview; a few, so the cache stays bounded. */
export const THUMBNAIL_WIDTHS = [256, 512, 1024] as const;
export type ThumbnailWidth = (typeof THUMBNAIL_WIDTHS)[number];

/** Pictures sharp may shrink: the image outputs a job may publish (registry/output-media.ts). */
const PICTURES = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);
/** More pixels than any output of ours; a picture past it is not decoded. */
const PIXEL_LIMIT = 100_000_000;
/** Pictures shrunk at once; sharp runs each on libuv's pool, which the rest of the server shares. */
const AT_ONCE = 2;

export interface ThumbnailDeps {
  /** Where thumbnails are kept: `<hex digest>.<width>.webp`. */
  dir: string;
  /** The blob's bytes, verified (BlobReader), and its recorded size and media type, or null if none was stored. */
  open(digest: string): Promise<Readable>;
  record(digest: string): Promise<{ bytes: number; mediaType: string } | null>;
}

/**
 * Small WebP copies of published pictures, for the gallery's grid: a page of 48 results costs 48 small files, not
 * 48 full ones. A thumbnail is made once per digest and width (the digest names the bytes, so it never goes stale)
 * and kept on disk; the same one asked for twice at once is made once.
 */
export class Thumbnails {
  readonly #deps: ThumbnailDeps;
  readonly #making = new Map<string, Promise<Buffer>>();
  #running = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(deps: ThumbnailDeps) {
    this.#deps = deps;
  }

  /** The WebP thumbnail of a stored picture at `width` (never wider than the picture); NOT_FOUND if it is not one. */
  async get(digest: string, width: ThumbnailWidth): Promise<Buffer> {
    const record = await this.#deps.record(digest);
    if (!record || !PICTURES.has(record.mediaType)) throw new MeshError('NOT_FOUND', { what: `A picture ${digest}` });
    const path = this.#path(digest, width);
    const cached = await readFile(path).catch(() => null);
    if (cached) return cached;
    const key = `${digest}.${width}`;
    let making = this.#making.get(key);
    if (!making) {
      making = this.#make(digest, width, path).finally(() => this.#making.delete(key));
      this.#making.set(key, making);
    }
    return making;
  }

  /** Forget the thumbnails of a digest (its last result was deleted). */
  async forget(digest: string): Promise<void> {
    await Promise.all(THUMBNAIL_WIDTHS.map((width) => rm(this.#path(digest, width), { force: true })));
  }

  #path(digest: string, width: number): string {
    return join(this.#deps.dir, `${digest.slice('sha256:'.length)}.${width}.webp`);
  }

  async #make(digest: string, width: number, path: string): Promise<Buffer> {
    await this.#turn();
    try {
      const chunks: Buffer[] = [];
      for await (const chunk of await this.#deps.open(digest)) chunks.push(chunk as Buffer);
      const thumbnail = await sharp(Buffer.concat(chunks), { limitInputPixels: PIXEL_LIMIT, animated: false })
        .resize({ width, height: width, fit: 'inside', withoutEnlargement: true })
        .webp({ quality: 80 })
        .toBuffer();
      await mkdir(this.#deps.dir, { recursive: true });
      // Renamed into place: a reader never sees half a file, and two processes writing the same one agree.
      const temporary = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
      await writeFile(temporary, thumbnail);
      await rename(temporary, path);
      return thumbnail;
    } finally {
      this.#running--;
      this.#waiting.shift()?.();
    }
  }

  async #turn(): Promise<void> {
    if (this.#running >= AT_ONCE) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    this.#running++;
  }
}
