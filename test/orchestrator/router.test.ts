import { describe, expect, it } from 'vitest';
import type { RegisteredModel } from '../../src/orchestrator/registry/index.js';
import { HostRegistry, HostSession, Router } from '../../src/orchestrator/routing/index.js';

const model = (memoryMB = 100): RegisteredModel => ({
  manifest: { name: 'gen', version: '1', engine: 'onnx', digest: 'sha256:gen', bytes: 1, memoryMB, jobTypes: ['image'], params: {} },
  policy: { batching: { maxBatchSize: 1, preferredBatchSizes: [], maxQueueDelayMs: 0 }, maxQueueSize: 10, maxTimeoutMs: 1000, retries: 0 },
  pipeline: { normalize: (input) => input, compatKey: () => '' },
});

function host(hosts: HostRegistry, id: string, options: { classes?: string[]; engines?: string[]; budgetMB?: number; concurrency?: number; cached?: string[] } = {}): HostSession {
  const session = new HostSession({
    id, classes: options.classes ?? ['image'], engines: options.engines ?? ['onnx'], concurrency: options.concurrency ?? 1, version: 't',
    devices: [{ id: 'gpu0', kind: 'gpu', name: 'g', memoryTotalMB: 8000, budgetMB: options.budgetMB ?? 4000, usedMB: 0 }],
  }, options.cached ?? [], id, 0, () => {});
  hosts.set(session);
  return session;
}

const busy = (session: HostSession, jobs = 1): void => {
  session.batches.set(`b-${session.id}-${session.batches.size}`, { id: 'b', model: 'gen', jobIds: new Set(Array.from({ length: jobs }, (_, i) => `j${i}`)), dispatchedAt: 0 });
};

describe('Router', () => {
  it('leaves out hosts of other classes, without the engine, or too small for the model', () => {
    const hosts = new HostRegistry();
    host(hosts, 'video-box', { classes: ['video'] });
    host(hosts, 'no-onnx', { engines: ['comfyui'] });
    host(hosts, 'tiny', { budgetMB: 50 });
    const good = host(hosts, 'laptop');
    const router = new Router(hosts);
    expect(router.candidates(model(), ['image']).map((session) => session.id)).toEqual(['laptop']);
    expect(router.pick(model(), ['image'])).toBe(good);
    expect(router.pick(model(), ['cloud'])).toBeNull();
  });

  it('prefers a host where the model is resident, then one with its file cached, then the least loaded; skips full hosts', () => {
    const hosts = new HostRegistry();
    const cold = host(hosts, 'cold', { concurrency: 4 });
    const cached = host(hosts, 'cached', { concurrency: 4, cached: ['sha256:gen'] });
    const warm = host(hosts, 'warm', { concurrency: 4 });
    warm.loaded({ model: 'gen', digest: 'sha256:gen', device: 'gpu0', memoryMB: 100, lastUsedAt: 0 });
    busy(warm, 3);
    const router = new Router(hosts);
    expect(router.pick(model(), ['image'])).toBe(warm);
    busy(warm);
    busy(warm);
    busy(warm);
    expect(warm.freeSlots).toBe(0);
    expect(router.pick(model(), ['image'])).toBe(cached);
    cached.loaded({ model: 'other', digest: 'sha256:other', device: 'gpu0', memoryMB: 1, lastUsedAt: 0 });
    busy(cached, 2);
    expect(router.pick(model(), ['image'])).toBe(cached);
    expect(cold.jobsInFlight).toBe(0);
  });

  it('sees hosts join and leave through the registry', () => {
    const hosts = new HostRegistry();
    const router = new Router(hosts);
    let changes = 0;
    hosts.onChange(() => changes++);
    const laptop = host(hosts, 'laptop');
    expect(router.pick(model(), ['image'])).toBe(laptop);
    const replacement = new HostSession(laptop.info, [], 'second', 0, () => {});
    hosts.set(replacement);
    expect(hosts.delete(laptop)).toBe(false); // the old session is no longer the current one
    expect(router.pick(model(), ['image'])).toBe(replacement);
    expect(hosts.delete(replacement)).toBe(true);
    expect(router.pick(model(), ['image'])).toBeNull();
    expect(changes).toBe(3);
  });
});
