import { createReadStream } from 'node:fs';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { httpFetch } from '../../net/http-client.js';
import type { BlobStore } from '../blobs/blob-store.js';

/** How a file looked when it was imported: the same size, times and inode mean the same bytes (as in the agent's model cache). */
interface Imported {
  digest: string;
  bytes: number;
  size?: number;
  mtimeMs?: number;
  ctimeMs?: number;
  ino?: number;
}

/**
 * Imports the files of models declared in mesh.yaml into the blob store, so
 * agents pull them by digest like any model file. A path is hashed as it is
 * copied; a URL is downloaded the same way. Imports are remembered
 * (`<blobs>/imports.json`): a path whose size, times and inode have not
 * changed, or a URL fetched before, is not read again at the next start — a
 * model of several GB would otherwise be hashed on every start.
 */
export class ModelFiles {
  readonly #store: BlobStore;
  readonly #indexPath: string;
  readonly #fetch: (url: string) => Promise<Response>;
  #index: Record<string, Imported> | null = null;

  /** `fetchImpl`: how a URL is downloaded; default the mesh's HTTP client, following redirects (a model hub's CDN). */
  constructor(store: BlobStore, blobsDir: string, fetchImpl: (url: string) => Promise<Response> = (url) => httpFetch(url, { redirects: 20 })) {
    this.#store = store;
    this.#indexPath = join(blobsDir, 'imports.json');
    this.#fetch = fetchImpl;
  }

  /**
   * The digest and size of `source` (an absolute path or an http(s) URL), stored in the blob store. With
   * `expected`, bytes that hash otherwise are refused (DIGEST_MISMATCH) and nothing is stored.
   */
  async import(source: string, expected: string | null): Promise<{ digest: string; bytes: number }> {
    const index = await this.#load();
    const url = /^https?:\/\//i.test(source);
    const known = index[source];
    const now = url ? null : await stat(source);
    if (known && (expected === null || known.digest === expected) && await this.#store.has(known.digest)) {
      if (url || (now && known.size === now.size && known.mtimeMs === now.mtimeMs && known.ctimeMs === now.ctimeMs && known.ino === now.ino)) {
        return { digest: known.digest, bytes: known.bytes };
      }
    }
    const stored = await this.#store.putStream(url ? await this.#download(source) : createReadStream(source), expected === null ? {} : { expected });
    index[source] = now ? { ...stored, size: now.size, mtimeMs: now.mtimeMs, ctimeMs: now.ctimeMs, ino: now.ino } : stored;
    // The index stays on the orchestrator's disk whatever the store: with a bucket, the blob folder may not exist yet.
    await mkdir(dirname(this.#indexPath), { recursive: true });
    await writeFile(this.#indexPath, `${JSON.stringify(index, null, 2)}\n`);
    return stored;
  }

  async #download(url: string): Promise<Readable> {
    const response = await this.#fetch(url);
    // Caught by ModelRegistry.addDeclared, which reports it as a ConfigError naming models.<name>.file.
    if (!response.ok || !response.body) throw new Error(`the download answered HTTP ${response.status}`);
    return Readable.fromWeb(response.body as import('node:stream/web').ReadableStream);
  }

  async #load(): Promise<Record<string, Imported>> {
    if (this.#index) return this.#index;
    try {
      this.#index = JSON.parse(await readFile(this.#indexPath, 'utf8')) as Record<string, Imported>;
    } catch {
      this.#index = {}; // none yet, or unreadable: import afresh
    }
    return this.#index;
  }
}
