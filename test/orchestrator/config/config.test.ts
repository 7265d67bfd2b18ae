import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { policyFor, resolveConfig } from '../../../src/orchestrator/config/config.js';
import { ConfigError } from '../../../src/protocol/errors.js';
import { ModelRegistry } from '../../../src/orchestrator/registry/index.js';
import { ROOT } from '../../helpers/mesh.js';

describe('mesh.yaml validation', () => {
  it('names every bad field by its path', () => {
    const attempt = () => resolveConfig({ server: { port: 70000, extra: 1 }, priorities: { levels: 0 }, models: { gen: { retries: 'lots' } } }, '/tmp/x');
    expect(attempt).toThrow(ConfigError);
    expect(attempt).toThrow(/server\.port/);
    expect(attempt).toThrow(/server: Unrecognized key: "extra"|server: .*extra/);
    expect(attempt).toThrow(/priorities\.levels/);
    expect(attempt).toThrow(/models\.gen\.retries/);
  });

  it('refuses a default priority beyond the levels, and a default model for an unrouted type', () => {
    expect(() => resolveConfig({ priorities: { levels: 2, default: 3 } }, '/tmp/x')).toThrow(/priorities\.default: 3 is beyond priorities\.levels \(2\)/);
    expect(() => resolveConfig({ defaultModels: { audio: 'gen' } }, '/tmp/x')).toThrow(/defaultModels\.audio: job type "audio" has no routing entry/);
  });

  it('routing one job type alone is a whole config: the built-in default models cover only the routed types', () => {
    // Found by the failover benchmark: `routing: {image: [image]}` refused to start over a tensor default nobody wrote.
    expect(resolveConfig({ routing: { image: ['image', 'cloud'] } }, '/tmp/x').defaultModels).toEqual({ image: 'gen' });
    expect(resolveConfig({}, '/tmp/x').defaultModels).toEqual({ image: 'gen', video: 'gen-video', tensor: 'mlp' });
    expect(() => resolveConfig({ routing: { image: ['image'] }, defaultModels: { tensor: 'mlp' } }, '/tmp/x')).toThrow(/defaultModels\.tensor: job type "tensor" has no routing entry/);
  });

  it('fills every default', () => {
    const config = resolveConfig({}, '/tmp/x');
    expect(config.server).toMatchObject({ host: '127.0.0.1', port: 7070 });
    // Routing sends video to class video by default (a local `gpumesh up` agent serves every class routing names).
    expect(config.routing).toEqual({ image: ['image'], video: ['video'], tensor: ['tensor'], ocr: ['tensor'], workflow: ['image'] });
    expect(config.data).toBe('/tmp/x');
  });

  it('the gallery grant lasts 12 h in the default album, and the audit log keeps 30 days or 100000 entries, unless mesh.yaml says otherwise', () => {
    const defaults = resolveConfig({}, '/tmp/x');
    expect(defaults.gallery).toEqual({ grantTtl: '12h', albums: ['default'] });
    expect(defaults.audit).toEqual({ retentionDays: 30, maxRows: 100_000 });
    const set = resolveConfig({ gallery: { grantTtl: '90m', albums: ['family'] }, audit: { retentionDays: 7, maxRows: 5000 } }, '/tmp/x');
    expect(set.gallery).toEqual({ grantTtl: '90m', albums: ['family'] });
    expect(set.audit).toEqual({ retentionDays: 7, maxRows: 5000 });
    expect(() => resolveConfig({ gallery: { grantTtl: 'forever' } }, '/tmp/x')).toThrow(/gallery\.grantTtl: a duration such as 90m, 12h or 7d/);
    expect(() => resolveConfig({ audit: { maxRows: 10 } }, '/tmp/x')).toThrow(/audit\.maxRows/);
  });

  it('breakers and health: documented defaults, and rows that contradict each other are refused by name', () => {
    const config = resolveConfig({ breakers: { host: { failuresToOpen: 5 } } }, '/tmp/x');
    expect(config.breakers.replica).toEqual({ failuresToOpen: 3, failureRatio: 0.25, window: 20, minCalls: 8, openForS: 10, maxOpenForS: 300, successesToClose: 2 });
    expect(config.breakers.host.failuresToOpen).toBe(5);
    expect(config.health).toEqual({ probeIntervalMs: 30_000, attemptTimeout: { factor: 5, floorMs: 10_000, loadMs: 120_000 } });
    expect(() => resolveConfig({ breakers: { replica: { window: 5, minCalls: 6 } } }, '/tmp/x')).toThrow(/breakers\.replica\.minCalls: 6 is more than breakers\.replica\.window \(5\)/);
    expect(() => resolveConfig({ breakers: { host: { openForS: 60, maxOpenForS: 30 } } }, '/tmp/x')).toThrow(/breakers\.host\.maxOpenForS/);
    expect(() => resolveConfig({ breakers: { replica: { failureRatio: 1 } } }, '/tmp/x')).toThrow(/breakers\.replica\.failureRatio/);
  });

  it('a models: entry for a model the registry does not have is an error that names it', () => {
    const registry = new ModelRegistry(resolveConfig({ models: { gen: { retries: 1 }, genn: { retries: 1 } } }, '/tmp/x'));
    registry.add({ name: 'gen', version: '1', engine: 'onnx', digest: 'sha256:x', bytes: 1, memoryMB: 1, jobTypes: ['image'], params: {} });
    expect(() => registry.checkPolicies()).toThrow(ConfigError);
    expect(() => registry.checkPolicies()).toThrow(/models\.genn: no model "genn" in the registry \(it has: gen\)/);
  });

  it('replica policies: defaults, overrides, and errors that name the field', () => {
    const defaults = policyFor(resolveConfig({}, '/tmp/x'), 'gen', { batching: { maxBatchSize: 4, preferredBatchSizes: [], maxQueueDelayMs: 0 } });
    expect(defaults.replicas).toEqual({ min: 0, max: null, targetInFlight: 8, idleWindowMs: 300_000 });
    const config = resolveConfig({ models: { gen: { minReplicas: 1, maxReplicas: 3, targetInFlight: 5, idleWindowS: 1.5 } }, autoscaler: { intervalMs: 250 } }, '/tmp/x');
    expect(policyFor(config, 'gen').replicas).toEqual({ min: 1, max: 3, targetInFlight: 5, idleWindowMs: 1500 });
    expect(config.autoscaler.intervalMs).toBe(250);
    expect(resolveConfig({}, '/tmp/x').autoscaler.intervalMs).toBe(1000);
    expect(() => resolveConfig({ models: { gen: { minReplicas: 3, maxReplicas: 2 } } }, '/tmp/x')).toThrow(/models\.gen\.minReplicas: 3 is above maxReplicas \(2\)/);
    const bad = () => resolveConfig({ models: { gen: { minReplicas: -1, maxReplicas: 0, targetInFlight: 0, idleWindowS: -5 } } }, '/tmp/x');
    for (const field of ['minReplicas', 'maxReplicas', 'targetInFlight', 'idleWindowS']) expect(bad).toThrow(new RegExp(`models\\.gen\\.${field}`));
    expect(() => resolveConfig({ models: { gen: { minReplicas: 1.5 } } }, '/tmp/x')).toThrow(/models\.gen\.minReplicas/);
    expect(() => resolveConfig({ autoscaler: { intervalMs: 10 } }, '/tmp/x')).toThrow(/autoscaler\.intervalMs/);
  });
});

describe('the mesh.yaml reference in docs/operations.md', () => {
  const doc = readFileSync(join(ROOT, 'docs/operations.md'), 'utf8');
  const reference = parseYaml(/\n## mesh\.yaml\n[\s\S]*?```yaml\n([\s\S]*?)```/.exec(doc)![1]!) as Record<string, unknown>;
  // Settings by path; the maps a user fills with names of their own (job types, models) count as one setting each.
  const OPEN_MAPS = new Set(['routing', 'defaultModels', 'models']);
  const paths = (value: unknown, prefix = ''): string[] =>
    value !== null && typeof value === 'object' && !Array.isArray(value) && !OPEN_MAPS.has(prefix)
      ? Object.entries(value).flatMap(([key, field]) => paths(field, prefix ? `${prefix}.${key}` : key))
      : [prefix];

  it('is a mesh.yaml gpumesh accepts as it stands', () => {
    expect(() => resolveConfig(reference, '/tmp/x')).not.toThrow();
  });

  it('names every setting that has a default, with that default', () => {
    const defaults = resolveConfig({}, '/tmp/x');
    const documented = new Set(paths(reference));
    expect(paths(defaults).filter((path) => !documented.has(path))).toEqual([]);
    // What it shows is what a mesh gets when the setting is left out (data: the folder the reference names).
    const shown = resolveConfig(reference, '/tmp/x');
    const at = (config: unknown, path: string): unknown => path.split('.').reduce<unknown>((value, key) => (value as Record<string, unknown>)[key], config);
    for (const path of paths(defaults).filter((path) => !OPEN_MAPS.has(path) && path !== 'data')) expect(at(shown, path), path).toEqual(at(defaults, path));
  });
});
