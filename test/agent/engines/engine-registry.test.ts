import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import type { EndpointProvider } from '../../../src/agent/engines/kit/endpoint.js';
import { buildEngines, engineModule, ENGINES } from '../../../src/agent/engines/registry.js';
import type { EngineServices } from '../../../src/agent/engines/kit/module.js';
import { workClock } from '../../../src/protocol/clock.js';
import { Governor } from '../../../src/agent/governance/governor.js';
import { Supervisor } from '../../../src/agent/governance/supervisor.js';
import { ROOT } from '../../helpers/mesh.js';
import { ENGINE_DESCRIPTORS, ENGINE_NAMES } from '../../../src/protocol/engines/index.js';

const log = pino({ level: 'silent' });
const governor = Governor.withoutCgroups(log);
const supervisor = new Supervisor(log, governor);
afterAll(() => supervisor.stopAll());

const refuse: EndpointProvider = async () => {
  throw new Error('no servers in this test');
};
const services: EngineServices = { supervisor, governor, endpoints: refuse, clock: workClock, log };

describe('the engine registry', () => {
  it('lists each engine once, by the name its engine answers to', () => {
    expect(ENGINE_NAMES).toEqual(['onnx', 'sdcpp', 'openai-images', 'comfyui', 'oip', 'exec']);
    expect(new Set(ENGINE_NAMES).size).toBe(ENGINES.length);
    const engines = buildEngines(services);
    expect([...engines.keys()]).toEqual(ENGINE_NAMES);
    for (const [name, engine] of engines) expect(engine.name).toBe(name);
  });

  it('builds only the engines asked for, and refuses an unknown name, listing the registered ones', () => {
    expect([...buildEngines(services, ['exec', 'onnx']).keys()]).toEqual(['exec', 'onnx']);
    expect(() => buildEngines(services, ['onnx', 'sd-cpp'])).toThrow(/unknown engine "sd-cpp" \(registered: onnx, sdcpp, openai-images, comfyui, oip, exec\)/);
  });

  it('gives every engine its shared services: a server engine asks the endpoint provider the agent passed in', async () => {
    const asked: string[] = [];
    const provider: EndpointProvider = async ({ engine, manifest, modelPath, launch }) => {
      asked.push(`${engine} ${manifest.name} ${modelPath} ${launch.command}`);
      throw new Error('stop here');
    };
    const sdcpp = buildEngines({ ...services, endpoints: provider }, ['sdcpp']).get('sdcpp')!;
    const manifest = {
      name: 'sd', version: '1', engine: 'sdcpp', digest: `sha256:${'0'.repeat(64)}`, file: false, bytes: 0, memoryMB: 1, jobTypes: ['image'], params: {},
      settings: { command: 'sd-server --port ${PORT}' },
    };
    await expect(sdcpp.load(manifest, null, { id: 'cpu', kind: 'cpu', name: 'CPU', memoryTotalMB: 1, budgetMB: 1, usedMB: 0 })).rejects.toThrow('stop here');
    expect(asked).toEqual(['sdcpp sd null sd-server --port ${PORT}']);
  });

  it('the agent has a factory for every engine the orchestrator knows, in the same order, each with its descriptor', () => {
    expect(ENGINES.map((module) => module.descriptor)).toEqual(ENGINE_DESCRIPTORS);
  });

  it('every registered engine has its contract test (adding an engine is its folder, its line and its contract test)', () => {
    for (const name of ENGINE_NAMES) {
      const contract = `test/agent/engines/${name}/${name}-engine.test.ts`;
      expect(existsSync(join(ROOT, contract)), contract).toBe(true);
    }
  });

  it("each engine's own schema checks a model's settings, with its defaults", () => {
    expect(engineModule('onnx')!.descriptor.settings.safeParse({ pipeline: 'tensor' }).success).toBe(true);
    expect(engineModule('onnx')!.descriptor.settings.safeParse({ pipeline: 'diffusion' }).success).toBe(false);
    expect(engineModule('exec')!.descriptor.settings.safeParse({}).success).toBe(false); // a command is required
    expect(engineModule('nope')).toBeUndefined();
  });

  it('server engines take a url or a command (never both), and each has its own readiness route by default', () => {
    const readiness: Record<string, string> = { sdcpp: '/sdcpp/v1/capabilities', 'openai-images': '/v1/models', comfyui: '/system_stats', oip: '/v2/health/ready' };
    const servers = ENGINE_DESCRIPTORS.filter((module) => module.server);
    expect(servers.map((module) => module.name)).toEqual(Object.keys(readiness));
    for (const module of servers) {
      const started = module.settings.parse({ command: 'server --port ${PORT}' }) as Record<string, unknown>;
      expect(started, module.name).toMatchObject({ command: 'server --port ${PORT}', readiness: { http: readiness[module.name] }, idleStopMs: null, memoryLimitMB: null });
      const both = module.settings.safeParse({ url: 'http://127.0.0.1:1', command: 'server' });
      expect(both.success, module.name).toBe(false);
      expect(both.error!.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')).toMatch(/command: give settings\.url .* or settings\.command .*, not both/);
    }
    expect(ENGINE_DESCRIPTORS.filter((module) => module.needsFile).map((module) => module.name)).toEqual(['onnx']);
  });
});
