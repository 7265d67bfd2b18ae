/**
 * Keep at most `limit` entries of an insertion-ordered Set or Map by dropping the oldest — the bounded memory of
 * "what was seen lately" (probes counted, hosts departed, blobs verified). Written once here rather than as
 * `x.delete(x.keys().next().value!)` at each place.
 */
export function keepNewest<K>(collection: Set<K> | Map<K, unknown>, limit: number): void {
  while (collection.size > limit) collection.delete(collection.keys().next().value!);
}
