import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { IndexedSet } from '../../../src/orchestrator/routing/indexed-set.js';

describe('IndexedSet', () => {
  it('holds what a Set holds, through any adds and deletes across the size where it starts and stops keeping a map', () => {
    fc.assert(fc.property(fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 40 })), { maxLength: 400 }), (steps) => {
      const set = new IndexedSet<number>();
      const reference = new Set<number>();
      for (const [adding, item] of steps) {
        if (adding) {
          set.add(item);
          reference.add(item);
        } else {
          expect(set.delete(item)).toBe(reference.delete(item));
        }
        expect(set.size).toBe(reference.size);
      }
      for (let item = 0; item <= 40; item++) expect(set.has(item)).toBe(reference.has(item));
      // Every member sits at exactly one position below size.
      const byPosition = Array.from({ length: set.size }, (_, position) => set.at(position));
      expect(new Set(byPosition)).toEqual(reference);
      expect([...set].sort((a, b) => a - b)).toEqual([...reference].sort((a, b) => a - b));
    }));
  });
});
