import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { HostAvailability } from '../../../src/agent/host-policy/availability.js';
import type { HostPolicies } from '../../../src/agent/host-policy/config.js';
import type { GpuSample } from '../../../src/agent/host-policy/gpu-telemetry.js';
import { Yielding } from '../../../src/agent/host-policy/yielding.js';
import type { EngineError } from '../../../src/agent/core/engine.js';
import type { HostAway } from '../../../src/protocol/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const log = pino({ level: 'silent' });

/** A host whose GPU reading the test sets, with the policies given; records every change it announces. */
function host(policies: HostPolicies, start = Date.parse('2026-12-07T12:00:00Z')) {
  const clock = new FakeClock(start);
  let gpu = { id: 'gpu0', usedMB: 500 as number | null, temperatureC: 50 as number | null, powerW: 60 as number | null, powerLimitW: 175 };
  let processes: GpuSample['processes'] = [];
  let active = false;
  const changes: (HostAway | null)[] = [];
  const availability = new HostAvailability({
    policies, clock, log,
    sample: async () => ({ at: clock.now(), gpus: [gpu], processes }),
    ownPids: () => new Set([100]),
    ownUsedMB: () => 500,
    ownerActive: async () => active,
    changed: (away) => changes.push(away),
    checked: () => {},
  });
  return {
    clock, availability, changes,
    set(next: Partial<typeof gpu>, apps: GpuSample['processes'] = processes) {
      gpu = { ...gpu, ...next };
      processes = apps;
    },
    activity(value: boolean) {
      active = value;
    },
  };
}

describe('whether a host takes work', () => {
  it('yields when another program takes a GPU, names it, and comes back only after the quiet period', async () => {
    const h = host({ owner: { gpuMemoryMB: 1024, checkEveryS: 1, running: 'finish', unloadWithinS: 30, quietS: 60 } });
    await h.availability.check();
    expect(h.availability.away).toBeNull();
    h.set({ usedMB: 500 + 6200 }, [{ device: 'gpu0', pid: 4242, name: 'game.exe', usedMB: 6200 }]);
    await h.availability.check();
    expect(h.availability.away).toMatchObject({ state: 'yielded', reason: 'game.exe holds 6.1 GB on gpu0', since: h.clock.now(), until: null });
    // Our own engines' memory is not the owner's.
    h.set({ usedMB: 500 + 700 }, [{ device: 'gpu0', pid: 100, name: 'node', usedMB: 700 }]);
    h.clock.advance(30_000);
    await h.availability.check();
    expect(h.availability.away?.state).toBe('yielded');
    expect(h.availability.away?.reason).toContain('back after 60 s without it');
    h.clock.advance(31_000);
    await h.availability.check();
    expect(h.availability.away).toBeNull();
    expect(h.changes.map((change) => change?.state ?? 'back')).toEqual(['yielded', 'yielded', 'back']);
  });

  it('a driver that lists no process memory (Windows): memory beyond the agent\'s own booking is the owner\'s', async () => {
    const h = host({ owner: { gpuMemoryMB: 1024, checkEveryS: 1, running: 'finish', unloadWithinS: 30, quietS: 0 } });
    h.set({ usedMB: 500 + 3000 }, [{ device: 'gpu0', pid: 4242, name: 'C:\\Games\\game.exe', usedMB: null }]);
    await h.availability.check();
    expect(h.availability.away?.reason).toBe('other programs hold 2.9 GB on gpu0');
  });

  it('the owner\'s activity command, run at its own pace', async () => {
    const h = host({ owner: { activityCommand: 'true', checkEveryS: 10, running: 'requeue', unloadWithinS: 0, quietS: 0 } });
    h.activity(true);
    await h.availability.check();
    expect(h.availability.away?.reason).toBe('its owner is using it (owner.activityCommand)');
    h.activity(false);
    h.clock.advance(5000);
    await h.availability.check();
    expect(h.availability.away?.state).toBe('yielded');
    h.clock.advance(5000);
    await h.availability.check();
    expect(h.availability.away).toBeNull();
  });

  it('out of hours until its next window, which it names; in its window it takes work', async () => {
    const h = host({ hours: { available: ['22:00-08:00'], timeZone: 'UTC' } }, Date.parse('2026-12-07T21:58:30Z'));
    await h.availability.check();
    expect(h.availability.away).toEqual({ state: 'off-hours', reason: 'out of hours until Mon 22:00 (UTC)', since: h.clock.now(), until: Date.parse('2026-12-07T22:00:00Z') });
    h.clock.advance(90_000);
    await h.availability.check();
    expect(h.availability.away).toBeNull();
  });

  it('too hot takes nothing until the margin below its limit', async () => {
    const h = host({ cool: { temperatureC: 85, marginC: 5, marginW: 20 } });
    h.set({ temperatureC: 90 });
    await h.availability.check();
    expect(h.availability.away).toMatchObject({ state: 'hot', reason: 'gpu0 at 90 °C (limit 85)' });
    h.set({ temperatureC: 82 });
    await h.availability.check();
    expect(h.availability.away?.state).toBe('hot');
    h.set({ temperatureC: 79 });
    await h.availability.check();
    expect(h.availability.away).toBeNull();
  });
});

describe('what a host that takes no work does with its work', () => {
  function yielding(running: 'finish' | 'requeue') {
    const clock = new FakeClock();
    const handedBack: EngineError[] = [];
    let size = 1;
    let resident = ['gen'];
    const y = new Yielding({
      host: 'laptop', owner: { gpuMemoryMB: 1, checkEveryS: 1, running, unloadWithinS: 30, quietS: 0 }, clock, log,
      batches: { get size() { return size; }, handBack: (error) => { handedBack.push(error); } },
      residency: { resident: () => resident, unloadAll: async () => { resident = []; } },
    });
    return { clock, y, handedBack, finish: () => { size = 0; }, resident: () => resident };
  }
  const away = (since: number): HostAway => ({ state: 'yielded', reason: 'game.exe holds 6.1 GB on gpu0', since, until: null });

  it('finish: running batches finish; one still running after unloadWithinS is handed back; then every model goes', async () => {
    const t = yielding('finish');
    t.y.enforce(away(t.clock.now()));
    expect(t.handedBack).toHaveLength(0);
    expect(t.resident()).toEqual(['gen']);
    t.clock.advance(30_000);
    t.y.enforce(away(t.clock.now() - 30_000));
    expect(t.handedBack.map((error) => [error.code, error.retryable])).toEqual([['HOST_AWAY', true]]);
    expect(t.handedBack[0]!.message).toBe('Host laptop takes no work now (game.exe holds 6.1 GB on gpu0): the job is handed back, for another host');
    t.finish();
    t.y.enforce(away(t.clock.now() - 30_000));
    await new Promise((resolve) => setImmediate(resolve));
    expect(t.resident()).toEqual([]);
  });

  it('requeue: handed back at once', () => {
    const t = yielding('requeue');
    t.y.enforce(away(t.clock.now()));
    expect(t.handedBack).toHaveLength(1);
  });
});

describe('the owner\'s commands, run for real', () => {
  it('exit 0 is "in use", anything else not; a string runs in the shell, a list as argv; one that takes too long says nothing', async () => {
    const { ownerActive, runOwnerCommand } = await import('../../../src/agent/host-policy/activity.js');
    expect(await ownerActive('test 1 -eq 1 && exit 0')).toBe(true);
    expect(await ownerActive('exit 3')).toBe(false);
    expect(await ownerActive([process.execPath, '-e', 'process.exit(0)'])).toBe(true);
    expect(await ownerActive([process.execPath, '-e', 'process.exit(1)'])).toBe(false);
    expect(await ownerActive(['/nonexistent/owner-check'])).toBe(false);
    expect(await runOwnerCommand([process.execPath, '-e', 'setTimeout(() => {}, 10000)'], 200)).toBe(false);
  });
});
