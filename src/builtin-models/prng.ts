/**
 * A small seeded PRNG (splitmix32: a Weyl sequence through the murmur3
 * finaliser) so that model weights are reproducible without Math.random.
 *
 * `uniform()` and `normalExact()` use integer and exactly representable
 * floating-point arithmetic only, so their results are bit-identical on every
 * JavaScript engine. `normal()` (Box–Muller) calls Math.log / Math.cos, whose
 * last bit is not guaranteed to match across engine versions; the model
 * builders therefore draw weights with `normalExact()`, and use `normal()` only
 * where a last-bit difference cannot change a model file.
 */
export class Prng {
  private state: number;
  private spare: number | undefined;

  constructor(seed: number) {
    if (!Number.isSafeInteger(seed)) throw new RangeError(`PRNG seed must be an integer, got ${seed}`);
    this.state = seed >>> 0;
  }

  /** Next 32-bit unsigned integer. */
  nextUint32(): number {
    this.state = (this.state + 0x9e3779b9) >>> 0;
    let z = this.state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  }

  /** Uniform in [0, 1), a multiple of 2^-32. */
  uniform(): number {
    return this.nextUint32() / 4294967296;
  }

  /** Standard normal by Box–Muller (caches the second value of each pair). */
  normal(): number {
    if (this.spare !== undefined) {
      const s = this.spare;
      this.spare = undefined;
      return s;
    }
    const u1 = 1 - this.uniform(); // (0, 1]: log is finite
    const u2 = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u1));
    this.spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  }

  /**
   * Approximately standard normal (Irwin–Hall: the sum of 12 uniforms minus 6,
   * mean 0, variance 1, range ±6). Every intermediate is an exact multiple of
   * 2^-32, so the value is bit-identical everywhere.
   */
  normalExact(): number {
    let sum = 0;
    for (let i = 0; i < 12; i++) sum += this.uniform();
    return sum - 6;
  }

  /** `n` float32 values, each `normalExact() * std`. */
  normals(n: number, std: number): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = this.normalExact() * std;
    return out;
  }

  /** `n` float32 values uniform in [lo, hi). */
  uniforms(n: number, lo: number, hi: number): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * this.uniform();
    return out;
  }
}
