import { describe, expect, it } from 'vitest';
import { ModelQueue, type QueuedJob } from '../../../src/orchestrator/scheduler/index.js';

let seq = 0;
const job = (fields: Partial<QueuedJob>): QueuedJob => ({
  id: `j${++seq}`, seq, model: 'm', priority: 2, enqueuedAt: 0, compatKey: 'a', classes: ['c'], ...fields,
});
const lineagesOf = (jobs: readonly QueuedJob[]): string => jobs.map((entry) => entry.lineage).join('');

describe('ModelQueue: turns between grant lineages', () => {
  it("takes a late lineage's single job in the next batch, not behind another lineage's backlog", () => {
    const queue = new ModelQueue();
    for (let i = 0; i < 300; i++) queue.push(job({ lineage: 'A', enqueuedAt: 0 }));
    expect(lineagesOf(queue.take('a', 4, 1, 1000))).toBe('AAAA');
    queue.push(job({ lineage: 'B', enqueuedAt: 5 }));
    const batch = queue.take('a', 4, 10, 1000);
    // B's job is at the front of the level's turns, as A's head is; ties go to the older, so it is second.
    expect(lineagesOf(batch)).toBe('ABAA');
    expect(queue.size).toBe(300 - 8 + 1);
  });

  it('interleaves several waiting lineages one job each, and a lone lineage still fills whole batches', () => {
    const queue = new ModelQueue();
    for (let i = 0; i < 6; i++) queue.push(job({ lineage: 'A' }));
    for (let i = 0; i < 2; i++) queue.push(job({ lineage: 'B' }));
    for (let i = 0; i < 2; i++) queue.push(job({ lineage: 'C' }));
    expect(lineagesOf(queue.take('a', 6, 0, 1000))).toBe('ABCABC');
    expect(lineagesOf(queue.take('a', 6, 0, 1000))).toBe('AAAA');
  });

  it('keeps each lineage first-in first-out and forgets a lineage that had nothing waiting', () => {
    const queue = new ModelQueue();
    const a = [job({ lineage: 'A' }), job({ lineage: 'A' }), job({ lineage: 'A' })];
    a.forEach((entry) => queue.push(entry));
    expect(queue.take('a', 3, 0, 1000).map((entry) => entry.id)).toEqual(a.map((entry) => entry.id));
    // A's turns do not follow it once its queue emptied: with B waiting, A comes back at the front too.
    for (let i = 0; i < 3; i++) queue.push(job({ lineage: 'B' }));
    queue.push(job({ lineage: 'A' }));
    expect(lineagesOf(queue.take('a', 2, 0, 1000))).toBe('BA');
  });

  it('a cancelled backlog gives its turns back', () => {
    const queue = new ModelQueue();
    const backlog = Array.from({ length: 5 }, () => job({ lineage: 'A' }));
    backlog.forEach((entry) => queue.push(entry));
    queue.push(job({ lineage: 'B' }));
    for (const entry of backlog) queue.remove(entry.id);
    queue.push(job({ lineage: 'A' }));
    queue.push(job({ lineage: 'B' }));
    expect(lineagesOf(queue.take('a', 3, 0, 1000))).toBe('BAB');
  });

  it('orders groups of one model by turn too: a lone job of another shape ranks before the backlog', () => {
    const queue = new ModelQueue();
    for (let i = 0; i < 10; i++) queue.push(job({ lineage: 'A', compatKey: '256' }));
    queue.take('256', 4, 0, 1000);
    queue.push(job({ lineage: 'B', compatKey: '512' }));
    const [big, small] = ['256', '512'].map((key) => queue.groups(0, 1000).find((group) => group.key === key)!);
    // Both heads are at the front (lag 0): the older goes first, then B's, before A's 6th.
    expect(big!.rank.lag).toBe(0);
    expect(small!.rank.lag).toBe(0);
    expect(queue.ahead(small!.best, 0, 1000)).toBe(1);
  });

  it('ages a level as a whole, so an earlier burst never outranks a later single job of its level by age', () => {
    const queue = new ModelQueue();
    for (let i = 0; i < 5; i++) queue.push(job({ lineage: 'A', priority: 3, enqueuedAt: 0 }));
    // B arrives just before A's burst would have aged a level.
    queue.push(job({ lineage: 'B', priority: 3, enqueuedAt: 999 }));
    const [group] = queue.groups(1500, 1000);
    expect(group!.rank.level).toBe(2);
    expect(lineagesOf(queue.take('a', 2, 1500, 1000))).toBe('AB');
  });

  it('puts priority before turns', () => {
    const queue = new ModelQueue();
    queue.push(job({ lineage: 'A', priority: 2 }));
    queue.push(job({ lineage: 'A', priority: 1 }));
    queue.push(job({ lineage: 'B', priority: 2 }));
    expect(queue.take('a', 3, 0, 60_000).map((entry) => `${entry.lineage}${entry.priority}`)).toEqual(['A1', 'A2', 'B2']);
  });
});
