import { describe, expect, it } from 'vitest';
import { EngineError } from '../../../src/agent/core/engine.js';
import { deliver, type InboxParts } from '../../../src/agent/session/inbox.js';
import type { HostAway, OrchestratorMessage } from '../../../src/protocol/index.js';

type Run = Extract<OrchestratorMessage, { type: 'run' }>;

/** Parts that write down what reached them, with the host away when `away` says. */
function parts(away: HostAway | null = null) {
  const seen: string[] = [];
  const reported: unknown[] = [];
  const to: InboxParts = {
    policy: { away, refusal: (why) => new EngineError('HOST_AWAY', `host box is away: ${why.reason}`, true) },
    batches: { run: async (message) => { seen.push(`run ${message.batchId}`); }, cancel: (jobId) => seen.push(`cancel ${jobId}`) },
    session: {
      report: (result) => reported.push(result),
      forget: (jobId) => seen.push(`forget ${jobId}`),
      acknowledged: (jobIds) => seen.push(`ack ${jobIds.join(',')}`),
    },
    loads: { load: async (model, hold) => { seen.push(`load ${model.name} hold=${hold}`); }, unload: async (model) => { seen.push(`unload ${model}`); } },
    relays: { open: (message) => seen.push(`relay-open ${message.relayId}`), receive: (message) => seen.push(`${message.type} ${message.relayId}`) },
    drainRequested: () => seen.push('drain'),
  };
  return { to, seen, reported };
}

const run = { type: 'run', batchId: 'b1', model: { name: 'mlp' }, jobs: [{ id: 'j1' }, { id: 'j2' }] } as unknown as Run;

describe('the agent\'s inbox: each orchestrator message to the part it is for', () => {
  it('routes runs, cancels, acknowledgements, loads, drains and relay traffic', () => {
    const { to, seen, reported } = parts();
    const messages = [
      run,
      { type: 'cancel', jobId: 'j1' },
      { type: 'ack', jobIds: ['j1', 'j2'] },
      { type: 'load', model: { name: 'gen' }, hold: true },
      { type: 'unload', model: 'gen' },
      { type: 'relay-open', relayId: 'r1' },
      { type: 'relay-data', relayId: 'r1' },
      { type: 'relay-credit', relayId: 'r1' },
      { type: 'relay-close', relayId: 'r1' },
      { type: 'drain' },
      { type: 'welcome' },
    ] as unknown as OrchestratorMessage[];
    for (const message of messages) deliver(message, to);
    expect(seen).toEqual([
      'run b1', 'cancel j1', 'forget j1', 'ack j1,j2', 'load gen hold=true', 'unload gen',
      'relay-open r1', 'relay-data r1', 'relay-credit r1', 'relay-close r1', 'drain',
    ]);
    expect(reported).toEqual([]);
  });

  it('hands a run back at once while the host is away: every job fails HOST_AWAY, retryable, and nothing runs', () => {
    const { to, seen, reported } = parts({ state: 'yielded', reason: 'game.exe holds 6.1 GB on gpu0', since: 0, until: null });
    deliver(run, to);
    expect(seen).toEqual([]);
    expect(reported).toEqual(['j1', 'j2'].map((jobId) => ({
      type: 'failed', jobId, batchId: 'b1', retryable: true, error: { code: 'HOST_AWAY', message: 'host box is away: game.exe holds 6.1 GB on gpu0' },
    })));
  });
});
