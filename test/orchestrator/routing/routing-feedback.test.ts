import { describe, expect, it } from 'vitest';
import { RoutingFeedback } from '../../../src/orchestrator/jobs/routing-feedback.js';
import { BreakerBoard } from '../../../src/orchestrator/routing/breakers.js';
import type { AttemptOutcome } from '../../../src/orchestrator/jobs/states.js';
import type { BreakerPolicy } from '../../../src/orchestrator/config/config.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const POLICY: BreakerPolicy = { failuresToOpen: 3, failureRatio: 0.25, window: 20, minCalls: 8, openForS: 10, maxOpenForS: 300 } as BreakerPolicy;

/** What a replica's breaker hears of failed attempts: the replica's faults, not a server that was not ready yet. */
describe('routing feedback to the breakers', () => {
  it('NOT_READY (a server starting or restarting, already waited for by its engine) counts nothing; ENGINE_UNREACHABLE does', () => {
    const breakers = new BreakerBoard({ clock: new FakeClock(), policies: { replica: POLICY, host: POLICY } });
    const feedback = new RoutingFeedback({ breakers, throughput: {} as never, health: {} as never, model: () => undefined });
    let batch = 0;
    const fail = (code: string): void => feedback.ended({
      job: { id: `j${batch}`, model: 'comfy', input: {} } as never, host: 'h1', batchId: `b${batch++}`, batchSize: 1,
      status: 'failed', error: { code, message: code } as never, retryable: true, computeMs: null,
    } satisfies AttemptOutcome);
    for (let i = 0; i < 5; i++) fail('NOT_READY');
    expect(breakers.view('h1', 'comfy')).toMatchObject({ state: 'closed', consecutiveFailures: 0 });
    for (let i = 0; i < 3; i++) fail('ENGINE_UNREACHABLE');
    expect(breakers.view('h1', 'comfy').state).toBe('open');
  });
});
