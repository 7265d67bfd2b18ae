import { describe, expect, it } from 'vitest';
import type { OrchestratorMessage } from '../../src/protocol/index.js';
import { FakeClock } from '../../src/orchestrator/clock.js';
import { HostSession } from '../../src/orchestrator/routing/index.js';

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

  it('without a delay, leave together at the end of the tick', async () => {
    const { sent, host } = session(null);
    host.ack('j1');
    host.ack('j2');
    expect(sent).toEqual([]);
    await Promise.resolve();
    expect(sent).toEqual([{ type: 'ack', jobIds: ['j1', 'j2'] }]);
  });
});
