/**
 * A set that can also hand out a member by position, so the router can draw
 * random members of a large pool in O(1). Removal swaps the last member into
 * the hole: order is not kept.
 */
export class IndexedSet<T> implements Iterable<T> {
  readonly #items: T[] = [];
  readonly #positions = new Map<T, number>();

  get size(): number {
    return this.#items.length;
  }

  has(item: T): boolean {
    return this.#positions.has(item);
  }

  at(position: number): T | undefined {
    return this.#items[position];
  }

  add(item: T): void {
    if (this.#positions.has(item)) return;
    this.#positions.set(item, this.#items.length);
    this.#items.push(item);
  }

  delete(item: T): boolean {
    const position = this.#positions.get(item);
    if (position === undefined) return false;
    const last = this.#items.pop()!;
    if (last !== item) {
      this.#items[position] = last;
      this.#positions.set(last, position);
    }
    this.#positions.delete(item);
    return true;
  }

  [Symbol.iterator](): Iterator<T> {
    return this.#items[Symbol.iterator]();
  }
}
