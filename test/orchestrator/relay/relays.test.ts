import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import type { ModelManifest, OrchestratorMessage } from '../../../src/protocol/index.js';
import { HostSession } from '../../../src/orchestrator/routing/index.js';
import { RelayMetrics } from '../../../src/orchestrator/relay/relay-metrics.js';
import { Relays, type RelayEnding, type RelayListener } from '../../../src/orchestrator/relay/relays.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const MANIFEST = { name: 'comfy', version: '1', engine: 'comfyui', digest: 'sha256:0', jobTypes: ['image'], memoryMB: 16 } as unknown as ModelManifest;

function setup(options: { max?: number; idleMs?: number } = {}) {
  const clock = new FakeClock();
  const sent: OrchestratorMessage[] = [];
  const session = new HostSession({ id: 'studio', classes: ['image'], engines: ['comfyui'], concurrency: 1, version: 't', devices: [] }, [], 's1', clock.now(), (message) => sent.push(message));
  const registry = new Registry();
  const relays = new Relays({
    clock, log: pino({ level: 'silent' }), metrics: new RelayMetrics(registry), chunkBytes: 4, windowBytes: 8, max: options.max ?? 4, idleMs: options.idleMs ?? 1000,
  });
  return { clock, sent, session, relays, registry };
}

/** A listener that records what it is told, handing data on at once. */
function recorder(): RelayListener & { heads: number[]; pieces: string[]; endings: RelayEnding[] } {
  const heads: number[] = [];
  const pieces: string[] = [];
  const endings: RelayEnding[] = [];
  return {
    heads, pieces, endings,
    head: (status) => heads.push(status),
    data: (piece, _flags, handedOn) => {
      pieces.push(piece.toString());
      handedOn();
    },
    ended: (ending) => endings.push(ending),
  };
}

const request = { kind: 'http' as const, method: 'GET', path: '/system_stats', headers: [], body: false };

describe('the orchestrator\'s relays', () => {
  it('opens a relay with the agent, hands on its answer and credits each piece back; an agent that runs past the window fails it', () => {
    const { relays, session, sent } = setup();
    const listener = recorder();
    const relay = relays.open({ session, manifest: MANIFEST }, request, listener);
    expect(sent[0]).toMatchObject({ type: 'relay-open', relayId: relay.id, model: { name: 'comfy' }, chunkBytes: 4, windowBytes: 8, request });
    relays.receive(session, { type: 'relay-head', relayId: relay.id, status: 200, headers: [] });
    relays.receive(session, { type: 'relay-data', relayId: relay.id, data: Buffer.from('abcd').toString('base64'), at: 0 });
    expect(listener.heads).toEqual([200]);
    expect(listener.pieces).toEqual(['abcd']);
    expect(sent.at(-1)).toEqual({ type: 'relay-credit', relayId: relay.id, bytes: 4 });

    const slow: RelayListener = { head: () => {}, data: () => {}, ended: listener.ended };
    const second = relays.open({ session, manifest: MANIFEST }, request, slow);
    for (let i = 0; i < 3; i++) relays.receive(session, { type: 'relay-data', relayId: second.id, data: Buffer.from('abcd').toString('base64'), at: i * 4 });
    expect(second.ended).toBe(true);
    expect(listener.endings.at(-1)?.error).toMatchObject({ code: 'RELAY_FAILED', message: expect.stringContaining('window') });
    expect(sent.at(-1)).toEqual({ type: 'relay-close', relayId: second.id });

    // A piece that does not start where the last ended: one was lost on the link (its message budget dropped it).
    const third = relays.open({ session, manifest: MANIFEST }, request, recorder());
    const ended: RelayEnding[] = [];
    const gap = relays.open({ session, manifest: MANIFEST }, request, { ...recorder(), ended: (ending) => ended.push(ending) });
    relays.receive(session, { type: 'relay-data', relayId: gap.id, data: Buffer.from('ab').toString('base64'), at: 2 });
    expect(ended[0]?.error?.message).toContain('lost');
    expect(third.ended).toBe(false);
  });

  it('an agent\'s refusal reaches the client as its code; any other failure is RELAY_FAILED; ComfyUI\'s close keeps its code', () => {
    const { relays, session } = setup();
    const endings: RelayEnding[] = [];
    for (const code of ['PASSTHROUGH_NOT_FOUND', 'RELAY_UNAVAILABLE', 'ENGINE_FAILED']) {
      const listener = recorder();
      const relay = relays.open({ session, manifest: MANIFEST }, request, listener);
      relays.receive(session, { type: 'relay-close', relayId: relay.id, error: { code, message: 'why' } });
      endings.push(...listener.endings);
    }
    expect(endings.map((ending) => [ending.error?.code, ending.error?.status])).toEqual([['PASSTHROUGH_NOT_FOUND', 404], ['RELAY_UNAVAILABLE', 503], ['RELAY_FAILED', 502]]);
    expect(endings[1]!.error!.headers).toEqual({ 'retry-after': '2' });
    const listener = recorder();
    const socket = relays.open({ session, manifest: MANIFEST }, { kind: 'ws', path: '/ws?clientId=1', headers: [] }, listener);
    relays.receive(session, { type: 'relay-close', relayId: socket.id, code: 4000, reason: 'done' });
    expect(listener.endings).toEqual([{ code: 4000, reason: 'done' }]);
  });

  it('a link carries at most `max` relays (503 with Retry-After beyond); another host\'s session cannot touch them; a lost link fails them all', () => {
    const { relays, session, clock } = setup({ max: 2 });
    const other = new HostSession({ id: 'other', classes: ['image'], engines: ['comfyui'], concurrency: 1, version: 't', devices: [] }, [], 's2', clock.now(), () => {});
    const listeners = [recorder(), recorder()];
    const open = listeners.map((listener) => relays.open({ session, manifest: MANIFEST }, request, listener));
    expect(() => relays.open({ session, manifest: MANIFEST }, request, recorder())).toThrow(expect.objectContaining({ code: 'RELAY_UNAVAILABLE', headers: { 'retry-after': '2' } }));
    relays.receive(other, { type: 'relay-head', relayId: open[0]!.id, status: 200, headers: [] });
    expect(listeners[0]!.heads).toEqual([]);
    relays.lost(session, 'link dropped');
    expect(listeners.map((listener) => listener.endings[0]?.error?.code)).toEqual(['RELAY_FAILED', 'RELAY_FAILED']);
    expect(relays.openOn(session)).toBe(0);
    // Room again once they ended.
    expect(() => relays.open({ session, manifest: MANIFEST }, request, recorder())).not.toThrow();
  });

  it('an HTTP relay where nothing moves for idleMs fails; one where bytes keep moving does not', async () => {
    const { relays, session, clock, registry } = setup({ idleMs: 1000 });
    const quiet = recorder();
    const busy = recorder();
    relays.open({ session, manifest: MANIFEST }, request, quiet);
    const moving = relays.open({ session, manifest: MANIFEST }, request, busy);
    for (let i = 0; i < 4; i++) {
      clock.advance(600);
      relays.receive(session, { type: 'relay-credit', relayId: moving.id, bytes: 1 });
    }
    expect(quiet.endings[0]?.error).toMatchObject({ code: 'RELAY_FAILED', message: expect.stringContaining('1000 ms') });
    expect(busy.endings).toEqual([]);
    moving.close('client-gone');
    expect(await registry.getSingleMetricAsString('gpumesh_passthrough_relays_total')).toMatch(/outcome="failed"} 1[\s\S]*outcome="client-gone"} 1/);
  });
});
