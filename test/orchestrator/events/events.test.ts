import { describe, expect, it } from 'vitest';
import { EventBus, type ScopedEvent } from '../../../src/orchestrator/events/event-bus.js';

const scope = { type: 'image', model: 'gen', album: 'default' };
const publish = (bus: EventBus, n: number): void => {
  for (let k = 1; k <= n; k++) bus.publish({ type: 'cancelled', jobId: `j${k}`, at: new Date(0).toISOString() }, scope);
};

describe('EventBus replay', () => {
  it('replays what came after a Last-Event-ID, oldest first, across the wrap of its buffer', () => {
    const bus = new EventBus();
    const ids: string[] = [];
    bus.subscribeAll((scoped) => ids.push(scoped.id));
    publish(bus, 5000);
    const after = ids[4990]!;
    const replayed: ScopedEvent[] = [];
    const { replayed: ok } = bus.subscribeAll((scoped) => replayed.push(scoped), after);
    expect(ok).toBe(true);
    expect(replayed.map((scoped) => scoped.event.type === 'cancelled' && scoped.event.jobId)).toEqual(['j4992', 'j4993', 'j4994', 'j4995', 'j4996', 'j4997', 'j4998', 'j4999', 'j5000']);
  });

  it('keeps the newest 4,096 events: an older id must resync', () => {
    const bus = new EventBus();
    const ids: string[] = [];
    bus.subscribeAll((scoped) => ids.push(scoped.id));
    publish(bus, 5000);
    expect(bus.subscribeAll(() => {}, ids[5000 - 4096 - 2]).replayed).toBe(false);
    const replayed: ScopedEvent[] = [];
    expect(bus.subscribeAll((scoped) => replayed.push(scoped), ids[5000 - 4096 - 1]).replayed).toBe(true);
    expect(replayed).toHaveLength(4096);
  });

  it('replays an event as it was published (parsed back from the JSON it keeps, which streams send as it is)', () => {
    const bus = new EventBus();
    const ids: string[] = [];
    bus.subscribeAll((scoped) => ids.push(scoped.id));
    const event = { type: 'succeeded' as const, jobId: 'j1', artifacts: [], result: { outputs: { y: [1.5, -2] } }, at: new Date(0).toISOString() };
    bus.publish(event, scope);
    bus.publishMesh({ type: 'host:joined', host: 'box', classes: ['image'], at: new Date(0).toISOString() } as never);
    const replayed: ScopedEvent[] = [];
    bus.subscribeAll((scoped) => replayed.push(scoped), `${ids[0]!.split('.')[0]}.0`);
    expect(replayed.map(({ id, kind }) => ({ id, kind }))).toEqual([{ id: ids[0], kind: 'job' }, { id: ids[1], kind: 'mesh' }]);
    expect(replayed[0]).toMatchObject({ event, scope, data: JSON.stringify(event) });
  });

  it('keeps about 16 MiB of events: large results push older events out, and the newest stays whatever its size', () => {
    const bus = new EventBus();
    const ids: string[] = [];
    bus.subscribeAll((scoped) => ids.push(scoped.id));
    const large = (jobId: string, mib: number) => ({ type: 'succeeded' as const, jobId, artifacts: [], result: 'x'.repeat(mib * 1024 * 1024), at: new Date(0).toISOString() });
    publish(bus, 3);
    bus.publish(large('big1', 6), scope);
    bus.publish(large('big2', 6), scope);
    const replayedIds = (after: string): string[] => {
      const jobIds: string[] = [];
      bus.subscribeAll((scoped) => scoped.kind === 'job' && jobIds.push(scoped.event.jobId), after);
      return jobIds;
    };
    expect(replayedIds(ids[0]!)).toEqual(['j2', 'j3', 'big1', 'big2']);
    bus.publish(large('big3', 6), scope); // 18 MiB with the others: the oldest go until it fits
    expect(bus.subscribeAll(() => {}, ids[2]!).replayed).toBe(false);
    expect(replayedIds(ids[3]!)).toEqual(['big2', 'big3']);
    bus.publish(large('huge', 17), scope); // alone over the bound: kept alone
    expect(replayedIds(ids[5]!)).toEqual(['huge']);
  });
});

