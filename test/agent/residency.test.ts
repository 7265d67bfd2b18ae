import { existsSync, writeFileSync } from 'node:fs';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../src/agent/devices.js';
import { OnnxEngine } from '../../src/agent/engines/onnx/engine.js';
import { ModelCache } from '../../src/agent/model-cache.js';
import { Residency } from '../../src/agent/residency.js';
import { Supervisor } from '../../src/agent/supervisor.js';
import { builtinModel, MLP_INPUT_DIM } from '../../src/models/index.js';
import type { ModelManifest } from '../../src/protocol/index.js';
import { tempDir } from '../helpers/mesh.js';

const log = pino({ level: 'silent' });
const supervisor = new Supervisor(log);
afterAll(() => supervisor.stopAll());

function manifest(name: 'gen' | 'mlp'): ModelManifest {
  const model = builtinModel(name)!;
  return {
    name, version: model.version, engine: 'onnx', pipeline: name === 'gen' ? 'cppn-image' : 'tensor', digest: model.digest,
    bytes: model.bytes.length, memoryMB: model.memoryMB, jobTypes: model.jobTypes,
    params: name === 'gen' ? { defaultSteps: 6 } : { inputDim: MLP_INPUT_DIM, outputDim: 16 },
  };
}

/** The blob store as the agent sees it (HTTP GET by digest), served from memory; `tamper` corrupts one blob. */
function blobServer(tamper?: string) {
  const pulls: string[] = [];
  const fetchBlob = async (digest: string, _signal?: AbortSignal): Promise<Response> => {
    pulls.push(digest);
    const model = [builtinModel('gen')!, builtinModel('mlp')!].find((entry) => entry.digest === digest);
    if (!model) return new Response('not found', { status: 404 });
    const bytes = Buffer.from(model.bytes);
    if (digest === tamper) bytes[100] = bytes[100]! ^ 0xff;
    return new Response(bytes);
  };
  return { pulls, fetchBlob };
}

function residency(budgetMB: number, cache = new ModelCache(tempDir(), blobServer().fetchBlob)) {
  const events: string[] = [];
  const engines = new Map([['onnx', new OnnxEngine(supervisor)]]);
  return {
    events,
    residency: new Residency({
      engines, devices: () => [cpuDevice(budgetMB)], cache, log,
      events: { loaded: (model) => events.push(`+${model.model}`), unloaded: (model) => events.push(`-${model.model}`) },
    }),
  };
}

describe('model cache', () => {
  it('pulls once, verifies the digest, and re-hashes what it finds on disk', async () => {
    const dir = tempDir();
    const server = blobServer();
    const gen = manifest('gen');
    const path = await new ModelCache(dir, server.fetchBlob).path(gen.digest);
    expect(existsSync(path)).toBe(true);
    // A new process (new cache object) trusts nothing: it re-hashes, finds the file good and does not pull.
    await new ModelCache(dir, server.fetchBlob).path(gen.digest);
    expect(server.pulls).toEqual([gen.digest]);
    // A corrupted file on disk is pulled again.
    writeFileSync(path, 'garbage');
    await new ModelCache(dir, server.fetchBlob).path(gen.digest);
    expect(server.pulls).toEqual([gen.digest, gen.digest]);
  });

  it('refuses bytes that do not match their digest and keeps nothing', async () => {
    const dir = tempDir();
    const gen = manifest('gen');
    const cache = new ModelCache(dir, blobServer(gen.digest).fetchBlob);
    await expect(cache.path(gen.digest)).rejects.toMatchObject({ code: 'INTEGRITY_FAILED' });
    expect(existsSync(cache.pathOf(gen.digest))).toBe(false);
  });
});

describe('model cache pulls that stall', () => {
  /** A server that sends the headers and a few bytes, then nothing: the pull must fail, not hang. */
  const stalling = async (_digest: string, signal: AbortSignal): Promise<Response> => {
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new Uint8Array([1, 2, 3]));
        signal.addEventListener('abort', () => controller.error(signal.reason));
      },
    });
    return new Response(body);
  };

  it('gives up a pull that receives nothing for the idle timeout', async () => {
    const cache = new ModelCache(tempDir(), stalling, { idleTimeoutMs: 100 });
    await expect(cache.path(manifest('gen').digest)).rejects.toThrow(/no data for 100 ms/);
  });

  it('abortPulls ends pulls in progress at once', async () => {
    const cache = new ModelCache(tempDir(), stalling, { idleTimeoutMs: 60_000 });
    const pull = cache.path(manifest('gen').digest);
    setTimeout(() => cache.abortPulls('the orchestrator link went down'), 20);
    await expect(pull).rejects.toMatchObject({ code: 'ENGINE_FAILED', message: expect.stringContaining('link went down') });
  });
});

describe('residency', () => {
  it('loads on demand and evicts the least recently used idle model to fit the budget', async () => {
    const { residency: models, events } = residency(manifest('gen').memoryMB + 2);
    const gen = await models.acquire(manifest('gen'));
    expect(gen.loadMs).toBeGreaterThan(0);
    models.release('gen');
    expect((await models.acquire(manifest('gen'))).loadMs).toBe(0); // already resident
    models.release('gen');
    await models.acquire(manifest('mlp'));
    models.release('mlp');
    expect(events).toEqual(['+gen', '-gen', '+mlp']);
    expect(models.resident().map((entry) => entry.model)).toEqual(['mlp']);
    await models.unloadAll();
  });

  it('never evicts a model in use, and refuses a model larger than every budget', async () => {
    const { residency: models } = residency(manifest('gen').memoryMB + 2);
    await models.acquire(manifest('gen'));
    await expect(models.acquire(manifest('mlp'))).rejects.toThrow(/no device has room/);
    models.release('gen');
    const { residency: small } = residency(64);
    await expect(small.acquire(manifest('gen'))).rejects.toMatchObject({ code: 'MODEL_TOO_LARGE' });
    await models.unloadAll();
  });

  it('scales to zero: idle models unload and the engine process ends', async () => {
    const { residency: models } = residency(1024);
    const before = supervisor.count;
    await models.acquire(manifest('mlp'));
    models.release('mlp');
    expect(supervisor.count).toBe(before + 1);
    expect(await models.unloadIdle(60_000)).toEqual([]);
    expect(await models.unloadIdle(0)).toEqual(['mlp']);
    expect(supervisor.count).toBe(before);
    expect(models.usedMB('cpu')).toBe(0);
  });
});
