/**
 * Per-digest locks for everything that decides, from what the store records, whether a blob's bytes stay: a request
 * storing a client's file (ClientBlobs), an agent's output arriving (JobOutputs) or being published (ResultIntake),
 * deleted results giving their bytes back (BlobReclaimer). Whoever holds a digest's lock knows no other of them
 * stores, records or removes it meanwhile: a check of what names the digest stays true until it lets go. In this
 * process only — the one orchestrator that writes the mesh (a standby writes nothing).
 */
export class DigestLocks {
  /** Per digest: the tail of the chain of holders (each waits for the one before). */
  readonly #tails = new Map<string, Promise<void>>();

  /** Wait for every holder of `digest` before this one; resolves with the function that lets the next go. */
  async lock(digest: string): Promise<() => void> {
    const before = this.#tails.get(digest) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = before.then(() => mine);
    this.#tails.set(digest, tail);
    await before;
    return () => {
      release();
      if (this.#tails.get(digest) === tail) this.#tails.delete(digest);
    };
  }

  /**
   * Lock several digests, each once, in digest order — so two holders of overlapping sets never wait on each other —
   * and resolve with the function that releases them all.
   */
  async lockAll(digests: Iterable<string>): Promise<() => void> {
    const releases: (() => void)[] = [];
    for (const digest of [...new Set(digests)].sort()) releases.push(await this.lock(digest));
    return () => {
      for (const release of releases) release();
    };
  }

  /** Run `fn` holding the locks of `digests`. */
  async holding<T>(digests: Iterable<string>, fn: () => Promise<T>): Promise<T> {
    const release = await this.lockAll(digests);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  /** Digests with a holder or a waiter now (tests: every lock is let go). */
  get size(): number {
    return this.#tails.size;
  }
}
