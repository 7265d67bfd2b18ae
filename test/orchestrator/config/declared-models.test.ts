import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfigFile, resolveConfig } from '../../../src/orchestrator/config/config.js';
import { ConfigError } from '../../../src/protocol/errors.js';
import { ModelRegistry } from '../../../src/orchestrator/registry/index.js';
import { LocalBlobStore } from '../../../src/orchestrator/blobs/local-blob-store.js';
import { definitionDigest, modelDefinitions, unknownEngines } from '../../../src/orchestrator/config/declared-models.js';
import { JOB_INPUTS } from '../../../src/orchestrator/job-inputs/job-inputs.js';
import { builtinModel } from '../../../src/builtin-models/index.js';
import { parse as parseYaml } from 'yaml';
import { ROOT, tempDir } from '../../helpers/mesh.js';

const sdServer = { engine: 'sdcpp', types: ['image'], settings: { command: 'sd-server --model ${MODEL_PATH} --listen-port ${PORT}' } };

/** The problems resolveConfig names, one per line. */
function problems(models: Record<string, unknown>, extra: Record<string, unknown> = {}): string[] {
  try {
    resolveConfig({ models, ...extra }, '/tmp/x');
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message.split('\n').slice(1).map((line) => line.trim());
  }
  return [];
}

describe('models declared in mesh.yaml', () => {
  it('a declaration gets its defaults; an entry without engine stays a policy', () => {
    const config = resolveConfig({ models: { sd: sdServer, gen: { retries: 1 } } }, '/tmp/x');
    expect(modelDefinitions(config.models)).toEqual([{
      name: 'sd', engine: 'sdcpp', version: '1', types: ['image'], memoryMB: 1024, params: {}, settings: sdServer.settings, file: null, sha256: null,
    }]);
  });

  it('names every bad field: the engine\'s own settings schema, a server named both ways, definition fields without an engine; a server named neither way is the hosts\' to declare', () => {
    expect(problems({
      sd: { ...sdServer, settings: { command: 'sd-server', maxInFlight: 0, readiness: { http: 'health' } } },
      bare: { engine: 'sdcpp', types: ['image'] },
      // Run by the hosts whose own host.yaml declares it: nothing is missing here.
      hosts: { engine: 'exec', types: ['image'], settings: { batch: true } },
      both: { engine: 'comfyui', types: ['image'], settings: { url: 'http://127.0.0.1:8188', command: 'python main.py' } },
      gen: { settings: { pipeline: 'tensor' }, file: '/x.onnx' },
    })).toEqual([
      'models.sd.settings.readiness.http: must be a path starting with /',
      expect.stringMatching(/^models\.sd\.settings\.maxInFlight: /),
      'models.both.settings.command: give settings.url (a server you already run) or settings.command (a server the agent starts), not both',
      'models.gen.file: only a model declared with an engine has file; without models.gen.engine this entry sets the policy of an existing model',
      'models.gen.settings: only a model declared with an engine has settings; without models.gen.engine this entry sets the policy of an existing model',
    ]);
  });

  it('names job types without input handling or routing, a missing file for an engine that loads one, and unknown keys', () => {
    expect(problems({
      a: { engine: 'exec', settings: { command: 'run' } },
      b: { engine: 'exec', types: ['audio'], settings: { command: 'run' } },
      c: { engine: 'exec', types: ['image', 'tensor'], settings: { command: 'run' } },
      d: { engine: 'onnx', types: ['tensor'], settings: { pipeline: 'tensor' }, sha256: 'a'.repeat(64) },
    }, { routing: { image: ['image'] }, defaultModels: { image: 'gen' } })).toEqual([
      'models.a.types: required: the job types the model serves (e.g. [image])',
      'models.b.types: job type "audio" has no input handling in this orchestrator (it has: image, video, tensor, ocr, workflow)',
      'models.c.types: job type "tensor" has no routing entry',
      'models.c.types: image and tensor take different inputs; one model serves job types of one input kind',
      'models.d.types: job type "tensor" has no routing entry',
      'models.d.file: the onnx engine loads a model file: give its path or URL',
      'models.d.sha256: a digest without a file; add models.d.file',
    ]);
    expect(problems({ sd: { ...sdServer, gpu: 1 } })).toEqual([expect.stringMatching(/^models\.sd: Unrecognized key: "gpu"/)]);
    expect(problems({ 'bad name': sdServer })).toEqual([expect.stringMatching(/^models\.bad name: a model name/)]);
  });

  it('reads jobTypes, the former name of types, as types: noted as deprecated, named as written in errors, with the digest it always had', () => {
    const old = { engine: 'comfyui', jobTypes: ['image'], settings: { url: 'http://127.0.0.1:8188', workflow: {} } };
    const config = resolveConfig({ models: { fronted: old } }, '/tmp/x');
    expect(config.deprecated).toEqual([{ field: 'models.fronted.jobTypes', use: 'models.fronted.types' }]);
    const [definition] = modelDefinitions(config.models);
    expect(definition!.types).toEqual(['image']);
    const renamed = resolveConfig({ models: { fronted: { ...old, jobTypes: undefined, types: ['image'] } } }, '/tmp/x');
    expect(renamed.deprecated).toBeUndefined();
    expect(definitionDigest(modelDefinitions(renamed.models)[0]!)).toBe(definitionDigest(definition!));
    // The key hashed is the one declared models were first hashed under: their versions stay as they were.
    const canonical = '{"engine":"comfyui","jobTypes":["image"],"name":"fronted","params":{},"settings":{"url":"http://127.0.0.1:8188","workflow":{}},"version":"1"}';
    expect(definitionDigest(definition!)).toBe(`sha256:${createHash('sha256').update(canonical).digest('hex')}`);
    expect(problems({ a: { engine: 'exec', jobTypes: ['audio'], settings: { command: 'run' } } })).toEqual([
      'models.a.jobTypes: job type "audio" has no input handling in this orchestrator (it has: image, video, tensor, ocr, workflow)',
    ]);
    expect(problems({ a: { ...sdServer, jobTypes: ['image'] } })).toEqual([
      'models.a.jobTypes: give the job types once, as models.a.types (jobTypes is its former name)',
    ]);
  });

  it('an engine this orchestrator does not know is not an error: agents that run it get the model', () => {
    const config = resolveConfig({ models: { whisper: { engine: 'whisper-cpp', types: ['tensor'], settings: { anything: true } } } }, '/tmp/x');
    expect(unknownEngines(modelDefinitions(config.models)).map((model) => model.name)).toEqual(['whisper']);
  });

  it('a file path is relative to mesh.yaml\'s folder; a URL stays as it is', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'mesh.yaml'), [
      'models:',
      '  local: { engine: exec, types: [image], file: weights/a.bin, settings: { command: run } }',
      '  remote: { engine: exec, types: [image], file: "https://example.org/b.bin", settings: { command: run } }',
    ].join('\n'));
    const config = loadConfigFile(join(dir, 'mesh.yaml'), dir);
    expect(config.models.local!.file).toBe(join(dir, 'weights/a.bin'));
    expect(config.models.remote!.file).toBe('https://example.org/b.bin');
  });
});

describe('the registry with declared models', () => {
  /** A blob store that counts the streams it stores (a model file read and hashed). */
  class CountingStore extends LocalBlobStore {
    streams = 0;
    override putStream(...args: Parameters<LocalBlobStore['putStream']>): ReturnType<LocalBlobStore['putStream']> {
      this.streams++;
      return super.putStream(...args);
    }
  }

  async function registryOf(models: Record<string, unknown>, data = tempDir()) {
    const config = resolveConfig({ models, data }, data);
    const registry = new ModelRegistry(config);
    const blobs = new CountingStore(join(data, 'blobs'));
    const recorded: string[] = [];
    await registry.addBuiltins(blobs, () => {});
    const declared = await registry.addDeclared(blobs, (digest) => recorded.push(digest));
    registry.checkPolicies();
    return { registry, blobs, recorded, declared };
  }

  it('imports a model\'s file into the blob store (pulled by digest); a model without a file is identified by its definition', async () => {
    const dir = tempDir();
    const bytes = Buffer.from('not really safetensors, but bytes all the same');
    writeFileSync(join(dir, 'sd.bin'), bytes);
    const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    const { registry, blobs, recorded } = await registryOf({ sd: { ...sdServer, file: join(dir, 'sd.bin'), memoryMB: 4000 }, fronted: { engine: 'comfyui', types: ['image'], settings: { url: 'http://127.0.0.1:8188', workflow: {} } } });
    expect(registry.get('sd')!.manifest).toMatchObject({ engine: 'sdcpp', digest, file: true, bytes: bytes.length, memoryMB: 4000, settings: sdServer.settings });
    expect(await blobs.has(digest)).toBe(true);
    expect(recorded).toEqual([digest]);
    const fronted = registry.get('fronted')!.manifest;
    expect(fronted).toMatchObject({ file: false, bytes: 0 });
    expect(fronted.digest).toBe(definitionDigest(modelDefinitions(resolveConfig({ models: { fronted: { engine: 'comfyui', types: ['image'], settings: { url: 'http://127.0.0.1:8188', workflow: {} } } } }, '/tmp/x').models)[0]!));
    // The job type's input handling is the orchestrator's, whatever the engine; the engine adds only its control markup.
    const inputs = registry.get('sd')!.jobInputs;
    expect(inputs.compatKey).toBe(JOB_INPUTS.image.compatKey);
    expect(() => inputs.normalize({ prompt: 'a fox <lora:x:1>' }, registry.get('sd')!.manifest)).toThrow(/prompt: contains a <lora:…> tag, control markup of the sdcpp engine/);
  });

  it('a definition changed in any field is a new version; the same one always hashes the same', () => {
    const [a] = modelDefinitions(resolveConfig({ models: { sd: { ...sdServer, settings: { url: 'http://a:1', extra: { x: 1, y: 2 } } } } }, '/tmp/x').models);
    const [b] = modelDefinitions(resolveConfig({ models: { sd: { ...sdServer, settings: { extra: { y: 2, x: 1 }, url: 'http://a:1' } } } }, '/tmp/x').models);
    const [c] = modelDefinitions(resolveConfig({ models: { sd: { ...sdServer, settings: { url: 'http://a:2', extra: { x: 1, y: 2 } } } } }, '/tmp/x').models);
    expect(definitionDigest(a!)).toBe(definitionDigest(b!));
    expect(definitionDigest(a!)).not.toBe(definitionDigest(c!));
  });

  it('keeps the built-in models byte for byte: the same digests, and the ONNX pipeline is the engine\'s setting', async () => {
    const { registry } = await registryOf({ gen: { retries: 1 } });
    expect(registry.get('gen')!.manifest).toMatchObject({ digest: builtinModel('gen')!.digest, file: true, settings: { pipeline: 'cppn-image' } });
    expect(registry.get('mlp')!.manifest).toMatchObject({ digest: builtinModel('mlp')!.digest, file: true, settings: { pipeline: 'tensor' } });
    expect(registry.get('gen')!.manifest).not.toHaveProperty('pipeline');
    expect(registry.get('gen')!.policy.retries).toBe(1);
  });

  it('refuses, naming the field: a declared model named like a built-in, a missing file, a file that does not match its sha256', async () => {
    await expect(registryOf({ gen: sdServer })).rejects.toThrow(/models\.gen\.engine: "gen" is a built-in model; a declared model needs a name of its own/);
    await expect(registryOf({ sd: { ...sdServer, file: '/nonexistent/sd.bin' } })).rejects.toThrow(/models\.sd\.file: cannot import \/nonexistent\/sd\.bin: .*ENOENT/);
    const dir = tempDir();
    writeFileSync(join(dir, 'sd.bin'), 'some bytes');
    await expect(registryOf({ sd: { ...sdServer, file: join(dir, 'sd.bin'), sha256: '0'.repeat(64) } }))
      .rejects.toThrow(new RegExp(`models\\.sd\\.file: cannot import .*sd\\.bin: its bytes hash to sha256:[0-9a-f]{64}, not sha256:${'0'.repeat(64)}`));
  });

  it('an unchanged file is not read again at the next start; a changed one is', async () => {
    const data = tempDir();
    const file = join(data, 'sd.bin');
    writeFileSync(file, 'version one');
    const first = await registryOf({ sd: { ...sdServer, file } }, data);
    expect(first.blobs.streams).toBe(1);
    const again = await registryOf({ sd: { ...sdServer, file } }, data);
    expect(again.blobs.streams).toBe(0);
    expect(again.registry.get('sd')!.manifest.digest).toBe(first.registry.get('sd')!.manifest.digest);
    writeFileSync(file, 'version two');
    const changed = await registryOf({ sd: { ...sdServer, file } }, data);
    expect(changed.blobs.streams).toBe(1);
    expect(changed.registry.get('sd')!.manifest.digest).toBe(`sha256:${createHash('sha256').update('version two').digest('hex')}`);
  });
});

describe('the image job type\'s input handling', () => {
  it('fills defaults from the model\'s params where it has them (a server model\'s own size and steps)', () => {
    const manifest = {
      name: 'sd', version: '1', engine: 'sdcpp', digest: `sha256:${'0'.repeat(64)}`, bytes: 0, memoryMB: 1, jobTypes: ['image'],
      params: { defaultWidth: 512, defaultHeight: 768, defaultSteps: 20 },
    };
    expect(JOB_INPUTS.image.normalize({ prompt: 'a cat', seed: 1 }, manifest)).toEqual({ prompt: 'a cat', seed: 1, width: 512, height: 768, steps: 20 });
    expect(JOB_INPUTS.image.normalize({ prompt: 'a cat', seed: 1 }, { ...manifest, params: {} })).toEqual({ prompt: 'a cat', seed: 1, width: 256, height: 256, steps: 6 });
  });
});

describe('the declarations in docs/operations.md', () => {
  const blocks = [...readFileSync(join(ROOT, 'docs/operations.md'), 'utf8').matchAll(/```yaml\n(models:[\s\S]*?)```/g)].map((match) => match[1]!);

  it('are valid mesh.yaml, engine settings included', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(6);
    for (const block of blocks) {
      const config = resolveConfig(parseYaml(block), '/tmp/x');
      expect(modelDefinitions(config.models).length, block).toBeGreaterThan(0);
    }
  });
});
