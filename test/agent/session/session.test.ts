import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { AgentMessage } from '../../../src/protocol/index.js';
import type { Result } from '../../../src/agent/batches/batch-runner.js';
import { Drain } from '../../../src/agent/session/drain.js';
import { Session, type HostDescription } from '../../../src/agent/session/session.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const log = pino({ level: 'silent' });
const host: HostDescription = {
  host: 'h1', classes: ['image'], devices: [], engines: ['onnx'], models: [], concurrency: 1, resident: [], tools: [],
  engineUser: 'nobody', configured: [],
};
const done = (jobId: string): Result => ({ type: 'done', jobId, batchId: 'b1', artifacts: [], timings: { loadMs: 0, computeMs: 1, totalMs: 1 } });

/** A session over a link that is up while `linked` says so, recording what went out. */
function session(clock: FakeClock) {
  const sent: AgentMessage[] = [];
  const state = { linked: true, settled: 0, running: [] as { jobId: string; batchId: string }[] };
  const subject = new Session({
    send: (message) => state.linked && sent.push(message) > 0, clock, describe: () => host,
    running: () => state.running, draining: () => false, beat: () => ({ resident: [], devices: [] }),
    settled: () => state.settled++,
  });
  return { subject, sent, state };
}

describe('the agent\'s session (fake clock)', () => {
  it('beats on the clock from the welcome until the link goes down, and out of turn when asked', () => {
    const clock = new FakeClock();
    const { subject, sent } = session(clock);
    subject.welcomed(1000);
    clock.advance(3000);
    expect(sent.map((message) => message.type)).toEqual(['heartbeat', 'heartbeat', 'heartbeat']);
    subject.beat();
    expect(sent).toHaveLength(4);
    subject.disconnected();
    clock.advance(5000);
    expect(sent).toHaveLength(4);
    expect(clock.pending()).toBe(0);
  });

  it('keeps results until acknowledged: listed in the hello, sent again after each welcome', () => {
    const clock = new FakeClock();
    const { subject, sent, state } = session(clock);
    state.linked = false;
    subject.report(done('j1'));
    subject.report(done('j2'));
    expect(sent).toEqual([]);
    state.running = [{ jobId: 'j3', batchId: 'b2' }];
    expect(subject.hello()).toMatchObject({ type: 'hello', host: 'h1', draining: false, inFlight: [{ jobId: 'j3', batchId: 'b2' }, { jobId: 'j1', batchId: 'b1' }, { jobId: 'j2', batchId: 'b1' }] });
    state.linked = true;
    subject.welcomed(60_000);
    expect(sent.map((message) => 'jobId' in message && message.jobId)).toEqual(['j1', 'j2']);
    subject.acknowledged(['j1']);
    subject.forget('j2');
    expect([subject.unacknowledged, state.settled]).toEqual([0, 2]);
    subject.disconnected();
  });
});

describe('draining (fake clock)', () => {
  it('announces itself once, ends when the work does, and leaves', async () => {
    const work = { batches: 1, unacknowledged: 1 };
    const calls: string[] = [];
    const drain = new Drain({ work: () => work, announce: () => calls.push('draining'), close: async () => void calls.push('closed'), clock: new FakeClock(), log });
    let over = false;
    void drain.start().then(() => (over = true));
    expect(drain.start()).toBe(drain.start());
    expect([drain.draining, calls]).toEqual([true, ['draining']]);
    work.batches = 0;
    drain.check();
    await Promise.resolve();
    expect(over).toBe(false);
    work.unacknowledged = 0;
    drain.check();
    expect(await drain.leave()).toBe(true);
    expect(calls).toEqual(['draining', 'closed']);
  });

  it('leaves when its limit runs out, with work unfinished', async () => {
    const clock = new FakeClock();
    const calls: string[] = [];
    const drain = new Drain({ work: () => ({ batches: 1, unacknowledged: 0 }), announce: () => {}, close: async () => void calls.push('closed'), clock, log });
    const leaving = drain.leave({ timeoutMs: 5000 });
    clock.advance(4999);
    await Promise.resolve();
    expect(calls).toEqual([]);
    clock.advance(1);
    expect(await leaving).toBe(false);
    expect(calls).toEqual(['closed']);
  });
});
