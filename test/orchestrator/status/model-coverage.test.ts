import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { EventBus } from '../../../src/orchestrator/events/event-bus.js';
import { ModelCoverage } from '../../../src/orchestrator/status/model-coverage.js';
import type { ModelRegistry, RegisteredModel } from '../../../src/orchestrator/registry/index.js';
import { HostRegistry, HostSession } from '../../../src/orchestrator/routing/index.js';

const host = (id: string, classes: string[], engines: string[], budgetMB: number): HostSession => new HostSession({
  id, classes, engines, concurrency: 1, version: 't',
  devices: [{ id: 'gpu0', kind: 'gpu', name: 'g', memoryTotalMB: budgetMB * 2, budgetMB, usedMB: 0 }],
}, [], `s-${id}`, 0, () => {});

const model = { manifest: { name: 'sd', version: '1', engine: 'sdcpp', digest: `sha256:${'a'.repeat(64)}`, bytes: 1, memoryMB: 6000, jobTypes: ['image'], params: {} } } as unknown as RegisteredModel;

function coverage(hosts: HostRegistry): ModelCoverage {
  return new ModelCoverage({
    hosts, registry: { get: () => model, all: () => [model] } as unknown as ModelRegistry, routing: { image: ['image'], tensor: ['tensor'] },
    events: new EventBus(), depth: () => 1, log: pino({ level: 'silent' }),
  });
}

describe('ModelCoverage', () => {
  it('says why no connected host can run a model: no host of its classes is not a reason; no engine, or no budget it fits, is', () => {
    const hosts = new HostRegistry();
    const check = coverage(hosts);
    expect(check.blocked(model)).toBeNull(); // nothing connected: the job waits for a host, nothing is wrong
    hosts.set(host('nas', ['tensor'], ['sdcpp'], 16_000));
    expect(check.blocked(model)).toBeNull(); // a host, but not of the model's classes
    hosts.set(host('laptop', ['image'], ['onnx'], 8000));
    expect(check.blocked(model)).toBe('no connected host runs the "sdcpp" engine (laptop runs onnx)');
    hosts.set(host('desktop', ['image'], ['onnx', 'sdcpp'], 4000));
    expect(check.blocked(model)).toBe('the model needs 6000 MB and the largest device budget among hosts running "sdcpp" is 4000 MB');
    hosts.set(host('rig', ['image', 'video'], ['sdcpp'], 12_000));
    expect(check.blocked(model)).toBeNull();
  });
});
