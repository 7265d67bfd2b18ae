/**
 * How fast jobs arrive for one model: an exponentially weighted mean of the
 * gaps between arrivals. The batcher asks it whether waiting for company is
 * likely to pay off; a mean that the silence since the last arrival already
 * exceeds is not trusted (the burst is over).
 */
export class ArrivalRate {
  #lastAt: number | null = null;
  #meanGapMs: number | null = null;

  /** Weight of the newest gap in the mean. */
  static readonly WEIGHT = 0.2;

  arrived(at: number): void {
    if (this.#lastAt !== null) {
      const gap = Math.max(0, at - this.#lastAt);
      this.#meanGapMs = this.#meanGapMs === null ? gap : this.#meanGapMs + ArrivalRate.WEIGHT * (gap - this.#meanGapMs);
    }
    this.#lastAt = Math.max(at, this.#lastAt ?? at);
  }

  /** Arrivals expected in the next `ms`, from the recent mean gap (0 with no evidence of a stream). */
  expectedWithin(ms: number, now: number): number {
    if (this.#lastAt === null || this.#meanGapMs === null) return 0;
    const gap = Math.max(this.#meanGapMs, now - this.#lastAt, 0.001);
    return ms / gap;
  }
}
