import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../helpers/fake-clock.js';
import { resolveConfig, type BreakerPolicy } from '../../../src/orchestrator/config/config.js';
import { Breaker, BreakerBoard, type BreakerTransition } from '../../../src/orchestrator/routing/index.js';

const policy = (overrides: Partial<BreakerPolicy> = {}): BreakerPolicy => ({ ...resolveConfig({}, '/tmp').breakers.replica, ...overrides });

function breaker(overrides: Partial<BreakerPolicy> = {}) {
  const clock = new FakeClock(0);
  const changes: BreakerTransition[] = [];
  return { clock, changes, breaker: new Breaker(clock, policy(overrides), (change) => changes.push(change)) };
}

describe('Breaker (cockatiel counters, our state machine, the fake clock)', () => {
  it('opens after failuresToOpen failures in a row; a success in between starts the count over', () => {
    const { breaker: b, changes } = breaker({ failuresToOpen: 3, minCalls: 20 });
    b.failure('ENGINE_CRASHED');
    b.failure('ENGINE_CRASHED');
    b.success();
    b.failure('ENGINE_CRASHED');
    b.failure('ENGINE_CRASHED');
    expect(b.state).toBe('closed');
    expect(b.view().consecutiveFailures).toBe(2);
    b.failure('AGENT_TIMEOUT: stalled');
    expect(b.state).toBe('open');
    expect(b.allowsWork).toBe(false);
    expect(changes).toEqual([{ to: 'open', reason: 'AGENT_TIMEOUT: stalled', openForMs: 10_000 }]);
    expect(b.view()).toMatchObject({ state: 'open', opens: 1, lastFailure: 'AGENT_TIMEOUT: stalled', openUntil: new Date(10_000).toISOString() });
  });

  it('opens on a failure ratio over the window, for a host that never fails twice in a row', () => {
    const { breaker: b } = breaker({ failuresToOpen: 3, failureRatio: 0.3, window: 9, minCalls: 6 });
    const outcomes: string[] = [];
    for (let call = 1; call <= 9 && b.state === 'closed'; call++) {
      if (call % 3 === 0) b.failure('ENGINE_FAILED');
      else b.success();
      outcomes.push(b.state);
    }
    // Two failures in six outcomes is a third: over 0.3, once the window holds minCalls outcomes.
    expect(outcomes).toEqual(['closed', 'closed', 'closed', 'closed', 'closed', 'open']);
  });

  it('half-opens when its open period ends, and a failed trial reopens it for twice as long, up to maxOpenForS', () => {
    const { breaker: b, clock, changes } = breaker({ failuresToOpen: 1, openForS: 1, maxOpenForS: 3 });
    b.failure('boom');
    clock.advance(999);
    expect(b.state).toBe('open');
    clock.advance(1);
    expect(b.state).toBe('half-open');
    expect(b.allowsWork).toBe(false); // real work waits; a probe is the trial
    b.failure('trial failed');
    expect(b.state).toBe('open');
    clock.advance(1999);
    expect(b.state).toBe('open');
    clock.advance(1);
    b.failure('again');
    clock.advance(3000);
    b.failure('and again');
    expect(changes.filter((change) => change.to === 'open').map((change) => change.openForMs)).toEqual([1000, 2000, 3000, 3000]);
    expect(b.view().opens).toBe(4);
  });

  it('closes after successesToClose trials succeed, and the next opening starts from openForS again', () => {
    const { breaker: b, clock, changes } = breaker({ failuresToOpen: 1, openForS: 1, successesToClose: 2 });
    b.failure('boom');
    clock.advance(1000);
    b.failure('trial failed'); // 2 s now
    clock.advance(2000);
    b.success();
    expect(b.state).toBe('half-open');
    expect(b.view().trialSuccesses).toBe(1);
    b.success();
    expect(b.state).toBe('closed');
    expect(b.allowsWork).toBe(true);
    b.failure('boom');
    expect(changes.map((change) => change.to)).toEqual(['open', 'half-open', 'open', 'half-open', 'closed', 'open']);
    expect(changes.at(-1)).toMatchObject({ openForMs: 1000 });
  });

  it('outcomes of batches sent before it opened do not move an open breaker', () => {
    const { breaker: b, clock, changes } = breaker({ failuresToOpen: 1, openForS: 1 });
    b.failure('boom');
    b.failure('late failure');
    b.success();
    expect(b.state).toBe('open');
    clock.advance(1000);
    expect(changes.map((change) => change.to)).toEqual(['open', 'half-open']);
  });
});

describe('BreakerBoard', () => {
  it('keeps one breaker per host × model and one per host for its link; either keeps work off the replica', () => {
    const clock = new FakeClock(0);
    const board = new BreakerBoard({ clock, policies: { replica: policy({ failuresToOpen: 2 }), host: policy({ failuresToOpen: 2, openForS: 5 }) } });
    const changes: unknown[] = [];
    board.onChange((change) => changes.push(change));
    board.failure('laptop', 'gen', 'ENGINE_CRASHED');
    board.failure('laptop', 'gen', 'ENGINE_CRASHED');
    expect(board.blocking('laptop', 'gen')).toEqual({ model: 'gen', state: 'open' });
    expect(board.blocking('laptop', 'mlp')).toBeNull();
    expect(changes).toEqual([{ host: 'laptop', model: 'gen', to: 'open', reason: 'ENGINE_CRASHED', openForMs: 10_000 }]);

    board.linkLost('desktop', 'link closed');
    board.success('desktop', 'gen'); // a success on the host resets its link breaker's run of failures too
    board.linkLost('desktop', 'link closed');
    expect(board.state('desktop', null)).toBe('closed');
    board.linkLost('desktop', 'no heartbeat for 6001 ms');
    expect(board.blocking('desktop', 'gen')).toEqual({ model: null, state: 'open' });
    expect(board.blocking('desktop', 'mlp')).toEqual({ model: null, state: 'open' });
    clock.advance(5000);
    expect(board.halfOpen()).toEqual([{ host: 'desktop', model: null }]);
    expect([...board.all()].map((entry) => `${entry.host}/${entry.model ?? '-'}:${entry.state}`).sort())
      .toEqual(['desktop/-:half-open', 'desktop/gen:closed', 'laptop/gen:open']);
    board.close();
  });
});
