import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../src/agent/devices.js';
import type { Engine, LoadedModel } from '../../../src/agent/core/engine.js';
import { LoadRequests } from '../../../src/agent/models/load-requests.js';
import { ModelCache } from '../../../src/agent/models/model-cache.js';
import { Residency } from '../../../src/agent/models/residency.js';
import { sha256Digest, type AgentMessage, type ModelManifest } from '../../../src/protocol/index.js';
import { tempDir } from '../../helpers/mesh.js';

const log = pino({ level: 'silent' });

/** Model files by digest, served from memory the way the orchestrator serves blobs. */
const files = new Map<string, Buffer>();
function manifest(name: string, memoryMB: number): ModelManifest {
  const bytes = Buffer.from(`the weights of ${name}`);
  const digest = sha256Digest(bytes);
  files.set(digest, bytes);
  return { name, version: '1', engine: 'fake', digest, bytes: bytes.length, memoryMB, jobTypes: ['tensor'], params: {} };
}

/**
 * An engine that loads instantly and holds nothing: these tests are about
 * which requests the agent honours, not about running models (the ONNX
 * engine has its own tests, and the integration tests use it for real).
 */
class FakeEngine implements Engine {
  readonly name = 'fake';
  readonly unloads: string[] = [];
  async load(model: ModelManifest, _path: string, device: LoadedModel['device']): Promise<LoadedModel> {
    return {
      manifest: model, device, memoryMB: model.memoryMB, exited: new Promise<string>(() => {}), run: async () => ({ outputs: [] }), cancel: () => {},
      unload: async () => {
        this.unloads.push(model.name);
      },
    };
  }

  async close(): Promise<void> {}
}

function agent(budgetMB: number) {
  const sent: AgentMessage[] = [];
  const engine = new FakeEngine();
  const cache = new ModelCache(tempDir(), async (digest) => {
    const bytes = files.get(digest);
    return bytes ? new Response(new Uint8Array(bytes)) : new Response('not found', { status: 404 });
  });
  const residency = new Residency({
    engines: new Map([['fake', engine]]), devices: () => [cpuDevice(budgetMB)], cache, log,
    events: {
      loaded: (model) => sent.push({ type: 'loaded', model: model.model, digest: model.digest, device: model.device, memoryMB: model.memoryMB }),
      unloaded: (model) => sent.push({ type: 'unloaded', ...model }),
    },
  });
  const running = new Set<string>();
  let draining = false;
  const loads = new LoadRequests({ residency, send: (message) => sent.push(message), busy: (model) => running.has(model), draining: () => draining, log });
  return {
    sent, engine, residency, loads, running,
    drain: () => {
      draining = true;
    },
    types: () => sent.map((message) => `${message.type}${'model' in message ? ` ${message.model}` : ''}`),
  };
}

describe('the orchestrator\'s load and unload requests on an agent', () => {
  it('loads a model and says so; a second load of a resident model is answered again', async () => {
    const host = agent(1000);
    const small = manifest('small', 100);
    await host.loads.load(small, false);
    expect(host.types()).toEqual(['loaded small']);
    await host.loads.load(small, false);
    expect(host.types()).toEqual(['loaded small', 'loaded small']);
  });

  it('a held model outlives the idle unload; an unheld one does not; unload lets a held one go', async () => {
    const host = agent(1000);
    const held = manifest('held', 100);
    const plain = manifest('plain', 100);
    await host.loads.load(held, true);
    await host.loads.load(plain, false);
    expect(await host.residency.unloadIdle(0, Date.now() + 1)).toEqual(['plain']);
    expect(host.loads.held).toEqual(['held']);
    await host.loads.unload('held');
    expect(host.residency.resident()).toEqual([]);
    expect(host.types()).toEqual(['loaded held', 'loaded plain', 'unloaded plain', 'unloaded held']);
  });

  it('refuses what does not fit: larger than the budget, or no room while held models fill it', async () => {
    const host = agent(300);
    await host.loads.load(manifest('huge', 500), false);
    expect(host.sent.at(-1)).toMatchObject({ type: 'load-refused', model: 'huge', error: { code: 'MODEL_TOO_LARGE' } });
    await host.loads.load(manifest('floor', 200), true);
    await host.loads.load(manifest('second', 200), false);
    expect(host.sent.at(-1)).toMatchObject({ type: 'load-refused', model: 'second', error: { code: 'NO_ROOM', message: expect.stringContaining('busy or held') } });
    expect(host.residency.resident().map((model) => model.model)).toEqual(['floor']);
    // An unheld resident model is evicted to make room instead.
    await host.loads.load(manifest('floor', 200), false);
    await host.loads.load(manifest('second', 200), false);
    expect(host.residency.resident().map((model) => model.model)).toEqual(['second']);
  });

  it('an unload waits for the model\'s running batch to end; a load in between cancels it', async () => {
    const host = agent(1000);
    const model = manifest('busy', 100);
    await host.loads.load(model, false);
    host.running.add('busy');
    await host.loads.unload('busy');
    expect(host.engine.unloads).toEqual([]);
    host.running.delete('busy');
    host.loads.batchEnded('busy');
    await host.loads.load(manifest('other', 100), false); // lets the queued unload run
    await new Promise((resolve) => setImmediate(resolve));
    expect(host.engine.unloads).toEqual(['busy']);

    await host.loads.load(model, false);
    host.running.add('busy');
    await host.loads.unload('busy');
    await host.loads.load(model, true);
    host.running.delete('busy');
    host.loads.batchEnded('busy');
    await new Promise((resolve) => setImmediate(resolve));
    expect(host.engine.unloads).toEqual(['busy']);
    expect(host.loads.held).toEqual(['busy']);
  });

  it('a draining agent loads nothing new', async () => {
    const host = agent(1000);
    host.drain();
    await host.loads.load(manifest('late', 100), false);
    expect(host.sent).toEqual([{ type: 'load-refused', model: 'late', error: { code: 'NOT_READY', message: expect.stringContaining('draining') } }]);
  });
});
