import { describe, expect, it } from 'vitest';
import type { OrchestratorMessage } from '../../../src/protocol/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { HostSession } from '../../../src/orchestrator/routing/index.js';

function session(ackDelayMs: number | null) {
  const clock = new FakeClock(0);
  const sent: OrchestratorMessage[] = [];
  const host = new HostSession(
    { id: 'laptop', classes: ['image'], devices: [], engines: ['onnx'], concurrency: 1, version: 'test' },
    [], 's1', clock.now(), (message) => sent.push(message), ackDelayMs === null ? null : { clock, ms: ackDelayMs },
  );
  return { clock, sent, host };
}

describe('HostSession acknowledgements', () => {
  it('ride along with the next message to the host, in one go, ahead of it', () => {
    const { sent, host } = session(5);
    host.ack('j1');
    host.ack('j2');
    expect(sent).toEqual([]);
    host.send({ type: 'cancel', jobId: 'j3' });
    expect(sent).toEqual([{ type: 'ack', jobIds: ['j1', 'j2'] }, { type: 'cancel', jobId: 'j3' }]);
  });

  it('leave on their own once the delay is up', () => {
    const { clock, sent, host } = session(5);
    host.ack('j1');
    clock.advance(4);
    expect(sent).toEqual([]);
    clock.advance(1);
    expect(sent).toEqual([{ type: 'ack', jobIds: ['j1'] }]);
    clock.advance(100);
    expect(sent).toHaveLength(1);
  });

  it('after riding along, the next ones still leave within the delay, on the timer the first ones set', () => {
    const { clock, sent, host } = session(5);
    host.ack('j1');
    clock.advance(2);
    host.send({ type: 'cancel', jobId: 'j3' });
    host.ack('j2'); // the timer set for j1 is still armed: it fires at 5, 3 ms from now
    clock.advance(2);
    expect(sent).toHaveLength(2);
    clock.advance(1);
    expect(sent).toEqual([{ type: 'ack', jobIds: ['j1'] }, { type: 'cancel', jobId: 'j3' }, { type: 'ack', jobIds: ['j2'] }]);
    host.ack('j4'); // none armed now: a new one, 5 ms
    clock.advance(4);
    expect(sent).toHaveLength(3);
    clock.advance(1);
    expect(sent.at(-1)).toEqual({ type: 'ack', jobIds: ['j4'] });
    expect(clock.pending()).toBe(0);
  });

  it('without a delay, leave together at the end of the tick', async () => {
    const { sent, host } = session(null);
    host.ack('j1');
    host.ack('j2');
    expect(sent).toEqual([]);
    await Promise.resolve();
    expect(sent).toEqual([{ type: 'ack', jobIds: ['j1', 'j2'] }]);
  });
});
