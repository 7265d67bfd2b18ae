import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HostRegistry, HostSession } from '../../../src/orchestrator/routing/index.js';

const MODELS = ['gen', 'mlp'] as const;
const CLASSES = ['image', 'tensor'] as const;

const session = (id: string, klass: string, concurrency: number): HostSession => new HostSession({
  id, classes: [klass], engines: ['onnx'], concurrency, version: 't',
  devices: [{ id: 'gpu0', kind: 'gpu', name: 'g', memoryTotalMB: 8000, budgetMB: 4000, usedMB: 0 }],
}, [], `s-${id}`, 0, () => {});

/** What each index should hold, recomputed from the hosts themselves. */
function expectIndexesMatch(hosts: HostRegistry, sessions: HostSession[]): void {
  for (const klass of CLASSES) {
    const ofClass = sessions.filter((host) => hosts.get(host.id) === host && host.info.classes.includes(klass));
    expect(new Set(hosts.inClass(klass))).toEqual(new Set(ofClass));
    expect(new Set(hosts.freeInClass(klass))).toEqual(new Set(ofClass.filter((host) => host.freeSlots > 0)));
    for (const model of MODELS) {
      const replicas = ofClass.filter((host) => host.hasReplica(model));
      expect(new Set(hosts.replicasIn(klass, model))).toEqual(new Set(replicas));
      expect(new Set(hosts.freeReplicasIn(klass, model))).toEqual(new Set(replicas.filter((host) => host.freeSlots > 0)));
    }
  }
  for (const model of MODELS) {
    expect(new Set(hosts.residentOn(model))).toEqual(new Set(sessions.filter((host) => hosts.get(host.id) === host && host.isResident(model))));
  }
}

describe('HostRegistry', () => {
  it('keeps every index equal to what its hosts are, through joins, leaves, loads, unloads, batches and replica changes', () => {
    const step = fc.oneof(
      fc.record({ kind: fc.constant('batch' as const), host: fc.nat(5), model: fc.constantFrom(...MODELS) }),
      fc.record({ kind: fc.constant('end' as const), host: fc.nat(5) }),
      fc.record({ kind: fc.constant('load' as const), host: fc.nat(5), model: fc.constantFrom(...MODELS) }),
      fc.record({ kind: fc.constant('unload' as const), host: fc.nat(5), model: fc.constantFrom(...MODELS) }),
      fc.record({ kind: fc.constant('change' as const), host: fc.nat(5), model: fc.constantFrom(...MODELS), change: fc.constantFrom('load' as const, 'unload' as const) }),
      fc.record({ kind: fc.constant('forget' as const), host: fc.nat(5), model: fc.constantFrom(...MODELS) }),
      fc.record({ kind: fc.constant('leave' as const), host: fc.nat(5) }),
      fc.record({ kind: fc.constant('join' as const), host: fc.nat(5) }),
    );
    fc.assert(fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
      const hosts = new HostRegistry();
      const sessions = Array.from({ length: 6 }, (_, i) => session(`h${i}`, CLASSES[i % 2]!, 1 + (i % 3)));
      for (const host of sessions) hosts.set(host);
      let batch = 0;
      for (const action of steps) {
        const host = sessions[action.host]!;
        switch (action.kind) {
          case 'batch': host.batches.set(`b${batch++}`, { id: `b${batch}`, model: action.model, jobIds: new Set(['j']), dispatchedAt: 0 }); break;
          case 'end': { const first = host.batches.keys().next(); if (!first.done) host.batches.delete(first.value); break; }
          case 'load': host.loaded({ model: action.model, digest: `sha256:${action.model}`, device: 'gpu0', memoryMB: 1, lastUsedAt: 0 }); break;
          case 'unload': host.unloaded(action.model); break;
          case 'change': host.replicaChanges.set(action.model, { change: action.change, at: 0 }); break;
          case 'forget': host.replicaChanges.delete(action.model); break;
          case 'leave': hosts.delete(host); break;
          case 'join': if (hosts.get(host.id) !== host) hosts.set(host); break;
        }
        expectIndexesMatch(hosts, sessions);
      }
    }), { numRuns: 200 });
  });
});
