/** Up to this many members an IndexedSet finds one by scanning its array; above, through a map of positions. */
const SCAN_UP_TO = 16;

/**
 * A set that can also hand out a member by position, so the router can draw
 * random members of a large pool in O(1). Removal swaps the last member into
 * the hole: order is not kept. A small set (most of them: the hosts of one
 * class in a home lab) keeps no map: hosts move in and out of the free sets at
 * every batch, and a V8 map that empties allocates a fresh hash table, in the
 * old generation once the map is long-lived, on every removal.
 */
export class IndexedSet<T> implements Iterable<T> {
  readonly #items: T[] = [];
  #positions: Map<T, number> | null = null;

  get size(): number {
    return this.#items.length;
  }

  has(item: T): boolean {
    return this.#positionOf(item) >= 0;
  }

  at(position: number): T | undefined {
    return this.#items[position];
  }

  add(item: T): void {
    if (this.has(item)) return;
    this.#positions?.set(item, this.#items.length);
    this.#items.push(item);
    if (!this.#positions && this.#items.length > SCAN_UP_TO) this.#positions = new Map(this.#items.map((member, position) => [member, position]));
  }

  delete(item: T): boolean {
    const position = this.#positionOf(item);
    if (position < 0) return false;
    const last = this.#items.pop()!;
    if (last !== item) {
      this.#items[position] = last;
      this.#positions?.set(last, position);
    }
    this.#positions?.delete(item);
    if (this.#positions && this.#items.length <= SCAN_UP_TO / 2) this.#positions = null;
    return true;
  }

  [Symbol.iterator](): Iterator<T> {
    return this.#items[Symbol.iterator]();
  }

  #positionOf(item: T): number {
    return this.#positions ? this.#positions.get(item) ?? -1 : this.#items.indexOf(item);
  }
}
