import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync, type Stats } from 'node:fs';
import { copyFile, link, mkdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { workClock, type Clock, type Timer } from '../../protocol/clock.js';
import { EngineError } from '../core/engine.js';

export type FetchBlob = (digest: string, signal: AbortSignal) => Promise<Response>;

/** By default, a pull that receives nothing for this long is given up (and the batch that needed it fails over). */
const IDLE_TIMEOUT_MS = 15_000;

/** Calls `onSilent` once nothing was `heard()` for `ms`: one timer a quiet period, not one a chunk. */
function silenceWatch(clock: Clock, ms: number, onSilent: () => void): { heard(): void; stop(): void } {
  let lastHeard = clock.now();
  let timer: Timer;
  const arm = (wait: number): void => {
    timer = clock.setTimer(wait, () => {
      const quiet = clock.now() - lastHeard;
      if (quiet >= ms) onSilent();
      else arm(ms - quiet);
    });
  };
  arm(ms);
  return { heard: () => (lastHeard = clock.now()), stop: () => timer.cancel() };
}

async function hashFile(path: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return `sha256:${hash.digest('hex')}`;
}

/**
 * What a file looked like when its hash was checked. Any write to it changes
 * its ctime (which, unlike mtime, cannot be set back), a replacement changes
 * its inode, a truncation its size: if all agree, the bytes are the ones hashed.
 */
interface Fingerprint {
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  dev: number;
}

const fingerprintOf = (stats: Stats): Fingerprint => ({ size: stats.size, mtimeMs: stats.mtimeMs, ctimeMs: stats.ctimeMs, ino: stats.ino, dev: stats.dev });
const sameFile = (a: Fingerprint, b: Fingerprint): boolean =>
  a.size === b.size && a.mtimeMs === b.mtimeMs && a.ctimeMs === b.ctimeMs && a.ino === b.ino && a.dev === b.dev;

/**
 * Model files on this host, by digest. A pull streams the blob from the
 * orchestrator, hashing it on the way, and keeps it only if the hash matches.
 * Every `path()` re-checks the file before it is handed out: a cheap look at
 * its fingerprint (size, times, inode) taken when it was verified, and a full
 * re-hash on any doubt; a file that fails is deleted and pulled again.
 * Engines that read the bytes themselves also hash what they load (see
 * Engine); when they find a mismatch the caller `invalidate`s the entry.
 */
export class ModelCache {
  readonly #dir: string;
  readonly #fetch: FetchBlob;
  readonly #verified = new Map<string, Fingerprint>();
  readonly #pulls = new Map<string, Promise<string>>();
  readonly #aborts = new Set<AbortController>();
  readonly #idleTimeoutMs: number;
  readonly #clock: Clock;
  readonly #onRepair: (digest: string, reason: string) => void;

  constructor(dir: string, fetchBlob: FetchBlob, options: { idleTimeoutMs?: number; clock?: Clock; onRepair?: (digest: string, reason: string) => void } = {}) {
    this.#dir = dir;
    this.#fetch = fetchBlob;
    this.#idleTimeoutMs = options.idleTimeoutMs ?? IDLE_TIMEOUT_MS;
    // A pull is work in progress: its timer keeps the process alive (workClock).
    this.#clock = options.clock ?? workClock;
    this.#onRepair = options.onRepair ?? (() => {});
    mkdirSync(join(dir, 'tmp'), { recursive: true });
  }

  pathOf(digest: string): string {
    return join(this.#dir, digest.replace(':', '-'));
  }

  /** Digests on disk and verified (reported in hello). */
  get cached(): string[] {
    return [...this.#verified.keys()];
  }

  /**
   * A model of several files as a folder of its own, each member under its name (`<cache>/sets/<model digest>/<name>`),
   * for engines that open a member by the name another member gives it (an ONNX network whose weights are an external
   * data file). The members are hard links to the verified files (a copy where the file system has no links), made
   * anew at every call: a member pulled again is a new file, and a link to the old one would keep its old bytes.
   * `members`: name → the verified file's path. Returns name → its path in the folder.
   */
  async namedSet(setDigest: string, members: Readonly<Record<string, string>>): Promise<Record<string, string>> {
    const folder = join(this.#dir, 'sets', setDigest.replace(':', '-'));
    await mkdir(folder, { recursive: true });
    const named: Record<string, string> = {};
    for (const [name, verified] of Object.entries(members)) {
      const path = join(folder, name);
      await rm(path, { force: true });
      await link(verified, path).catch(async (error: NodeJS.ErrnoException) => {
        if (error.code !== 'EXDEV' && error.code !== 'EPERM' && error.code !== 'ENOTSUP') throw error;
        await copyFile(verified, path);
      });
      named[name] = path;
    }
    return named;
  }

  /** Give up every pull in progress (the orchestrator they come from went away). */
  abortPulls(reason: string): void {
    // Abort reasons: the pull's catch reports them as ENGINE_FAILED (retryable), naming the model.
    for (const controller of this.#aborts) controller.abort(new Error(reason));
  }

  /** The local path of a model file, checked (and re-hashed, pulled or repaired as needed). */
  async path(digest: string): Promise<string> {
    const known = this.#verified.get(digest);
    if (known) {
      const now = await stat(this.pathOf(digest)).catch(() => null);
      if (now && sameFile(known, fingerprintOf(now))) return this.pathOf(digest);
      this.#verified.delete(digest); // changed, replaced or gone: hash it again
    }
    let pull = this.#pulls.get(digest);
    if (!pull) {
      pull = this.#ensure(digest).finally(() => this.#pulls.delete(digest));
      this.#pulls.set(digest, pull);
    }
    return pull;
  }

  /** The file of this digest is bad (an engine hashed what it read and it did not match): delete it, so the next `path` pulls it again. */
  async invalidate(digest: string, reason: string): Promise<void> {
    this.#verified.delete(digest);
    await this.#pulls.get(digest)?.catch(() => {});
    this.#onRepair(digest, reason);
    await rm(this.pathOf(digest), { force: true });
  }

  async #ensure(digest: string): Promise<string> {
    const target = this.pathOf(digest);
    // The fingerprint is taken before hashing: a write during the hash changes the ctime, so the next look doubts it again.
    const before = await stat(target).catch(() => null);
    if (before) {
      const actual = await hashFile(target).catch((error: Error) => `unreadable (${error.message})`);
      if (actual === digest) {
        this.#verified.set(digest, fingerprintOf(before));
        return target;
      }
      this.#onRepair(digest, `the cached file hashes to ${actual}`);
      await rm(target, { force: true });
    }
    await this.#pull(digest, target);
    const after = await stat(target);
    this.#verified.set(digest, fingerprintOf(after));
    return target;
  }

  async #pull(digest: string, target: string): Promise<void> {
    const controller = new AbortController();
    this.#aborts.add(controller);
    const idle = silenceWatch(this.#clock, this.#idleTimeoutMs, () => controller.abort(new Error(`no data for ${this.#idleTimeoutMs} ms`)));
    const temp = join(this.#dir, 'tmp', randomBytes(8).toString('hex'));
    const hash = createHash('sha256');
    try {
      const response = await this.#fetch(digest, controller.signal);
      if (!response.ok || !response.body) {
        throw new EngineError('ENGINE_FAILED', `pulling model ${digest} failed: HTTP ${response.status}`);
      }
      await pipeline(
        Readable.fromWeb(response.body as import('node:stream/web').ReadableStream),
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            idle.heard();
            hash.update(chunk);
            yield chunk;
          }
        },
        createWriteStream(temp),
        { signal: controller.signal },
      );
      const actual = `sha256:${hash.digest('hex')}`;
      if (actual !== digest) throw new EngineError('INTEGRITY_FAILED', `model blob ${digest} hashed to ${actual}; discarded`);
      await rename(temp, target);
    } catch (error) {
      if (error instanceof EngineError) throw error;
      const reason = controller.signal.aborted ? String((controller.signal.reason as Error)?.message ?? controller.signal.reason) : (error as Error).message;
      throw new EngineError('ENGINE_FAILED', `pulling model ${digest} failed: ${reason}`, true, { cause: error });
    } finally {
      idle.stop();
      this.#aborts.delete(controller);
      await rm(temp, { force: true });
    }
  }
}
