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
});
