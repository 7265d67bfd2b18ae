import { statfs as fsStatfs } from 'node:fs/promises';
import type { DiskView } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';

/** What statfs answers, the part used here. */
export interface FsStats {
  bavail: number;
  bsize: number;
  blocks: number;
}

export interface FreeSpaceDeps {
  path: string;
  minFreeBytes: number;
  now(): number;
  /** Measures a filesystem (default: fs.statfs). */
  statfs?(path: string): Promise<FsStats>;
  /** How long a measure is trusted. Default 1 s: the hot path never measures more often than that. */
  maxAgeMs?: number;
  /** The disk went below its floor (true) or came back above it (false). */
  onChange?(low: boolean, view: DiskView): void;
}

interface Sample {
  free: number;
  total: number;
  at: number;
}

/** What a write that met a full disk says, by its error's code (a Node system error, SQLite's). */
const FULL_CODES: Record<string, string> = {
  ENOSPC: 'no space is left on the device',
  EDQUOT: 'the disk quota is exhausted',
  SQLITE_FULL: 'the store\'s database cannot grow',
};

/**
 * The STORAGE_FULL an error amounts to when a write met a full disk (ENOSPC, EDQUOT, SQLITE_FULL, on it or on
 * what caused it), else null.
 */
export function storageFullError(error: unknown): MeshError | null {
  let cause: unknown = error;
  for (let depth = 0; depth < 4 && cause !== null && typeof cause === 'object'; depth++) {
    if (cause instanceof MeshError) return cause.code === 'STORAGE_FULL' ? cause : null;
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && Object.hasOwn(FULL_CODES, code)) {
      return new MeshError('STORAGE_FULL', { detail: `${FULL_CODES[code]}, ${code}` }, { cause: error });
    }
    cause = (cause as { cause?: unknown }).cause;
  }
  return null;
}

const MB = 1024 * 1024;
const mb = (bytes: number): string => `${(bytes / MB).toFixed(bytes < 10 * MB ? 1 : 0)} MB`;

/**
 * The free space of the data folder's filesystem, against a floor (storage.minFreeMB). Measured with statfs at most
 * once a `maxAgeMs`: `admit`, on the path of every upload and submit, answers from the last measure while it is fresh
 * and, when it is stale but was above the floor, measures again in the background without waiting — the hot path
 * never waits on the disk while there is room. Below the floor, or right after a write met a full disk (`sawFull`),
 * it waits for a fresh measure, so work is taken again as soon as space is back.
 */
export class FreeSpace {
  readonly #deps: FreeSpaceDeps;
  readonly #maxAgeMs: number;
  readonly #statfs: (path: string) => Promise<FsStats>;
  #sample: Sample | null = null;
  /** A write met a full disk since the last measure: it is not to be trusted. */
  #doubted = true;
  #measuring: Promise<void> | null = null;
  /** When statfs last failed, with no measure to go by. */
  #failedAt: number | null = null;
  #low = false;

  constructor(deps: FreeSpaceDeps) {
    this.#deps = deps;
    this.#maxAgeMs = deps.maxAgeMs ?? 1000;
    this.#statfs = deps.statfs ?? ((path) => fsStatfs(path));
  }

  get minFreeBytes(): number {
    return this.#deps.minFreeBytes;
  }

  /**
   * Before a request writes anything new (an upload, a job): null at once when there is room by a fresh enough
   * measure; otherwise a promise that settles once measured, rejecting with STORAGE_FULL below the floor.
   */
  admit(): Promise<void> | null {
    const sample = this.#sample;
    const now = this.#deps.now();
    if (sample === null && this.#failedAt !== null && now - this.#failedAt < this.#maxAgeMs) return null;
    const fresh = sample !== null && !this.#doubted && now - sample.at < this.#maxAgeMs;
    if (fresh) return this.#below(sample) ? Promise.reject(this.#refusal(sample)) : null;
    if (sample !== null && !this.#doubted && !this.#below(sample)) {
      // Stale, but there was room: measure again for the next request, and let this one go on.
      void this.#measure();
      return null;
    }
    return this.#measure().then(() => {
      const measured = this.#sample;
      if (measured !== null && this.#below(measured)) throw this.#refusal(measured);
    });
  }

  /** A write met a full disk (ENOSPC): the last measure is not believed; the next `admit` waits for a new one. */
  sawFull(): void {
    this.#doubted = true;
  }

  /** The disk now (measured again if the last measure is stale). */
  async view(): Promise<DiskView> {
    const sample = this.#sample;
    if (sample === null || this.#doubted || this.#deps.now() - sample.at >= this.#maxAgeMs) await this.#measure();
    return this.#view();
  }

  #view(): DiskView {
    const sample = this.#sample;
    return {
      path: this.#deps.path, freeBytes: sample?.free ?? 0, totalBytes: sample?.total ?? 0, minFreeBytes: this.#deps.minFreeBytes,
      low: sample !== null && this.#below(sample), checkedAt: sample === null ? null : new Date(sample.at).toISOString(),
    };
  }

  #below(sample: Sample): boolean {
    return sample.free < this.#deps.minFreeBytes;
  }

  #refusal(sample: Sample): MeshError {
    return new MeshError('STORAGE_FULL', {
      detail: `${mb(sample.free)} free of ${mb(sample.total)}, below the floor of ${mb(this.#deps.minFreeBytes)} (storage.minFreeMB); nothing new is stored until there is more`,
    });
  }

  /** One statfs at a time; a filesystem that cannot be measured keeps the last measure (and refuses nothing new). */
  #measure(): Promise<void> {
    this.#measuring ??= (async () => {
      try {
        const stats = await this.#statfs(this.#deps.path);
        this.#sample = { free: stats.bavail * stats.bsize, total: stats.blocks * stats.bsize, at: this.#deps.now() };
        this.#doubted = false;
        this.#failedAt = null;
        const low = this.#below(this.#sample);
        if (low !== this.#low) {
          this.#low = low;
          this.#deps.onChange?.(low, this.#view());
        }
      } catch {
        // statfs failed (the folder was removed under us): the last measure stands, or with none nothing is refused
        // on its account; tried again after maxAgeMs.
        this.#doubted = false;
        if (this.#sample) this.#sample = { ...this.#sample, at: this.#deps.now() };
        else this.#failedAt = this.#deps.now();
      } finally {
        this.#measuring = null;
      }
    })();
    return this.#measuring;
  }
}
