import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobEvent } from '../../src/protocol/api/index.js';
import { startKnobStandIn, type StandIn } from '../helpers/knob-standins.js';
import { removeDir, ROOT, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { sdcppStandinSettings } from '../helpers/standins.js';
import { agentCgroupDirs, childrenOf, isAlive } from '../helpers/procfs.js';

/**
 * Models declared in mesh.yaml for engines people already run, end to end with real processes: `gpumesh up`
 * (orchestrator, agent), an sd-server stand-in the agent starts from the model's command template and stops
 * after its idle window, and a ComfyUI stand-in the test runs, fronted by URL. The stand-ins speak the real
 * servers' APIs (test/fixtures/standins/); the real servers need a GPU and model weights.
 */
const WORKFLOW = join(ROOT, 'test/fixtures/comfyui/txt2img-api.json');
const IDLE_MS = 1500;

let comfy: StandIn;
let mesh: RunningMesh;
const data = tempDir();
const weights = join(data, 'sd-standin.gguf');

beforeAll(async () => {
  comfy = await startKnobStandIn('comfyui');
  await comfy.knobs({ stepMs: 5 });
  writeFileSync(weights, 'stand-in weights: any bytes the server can be pointed at');
  mesh = await startMesh({
    data,
    config: {
      models: {
        sd: {
          engine: 'sdcpp', types: ['image'], memoryMB: 64, file: 'sd-standin.gguf', params: { defaultSteps: 3 },
          settings: sdcppStandinSettings('--step-ms 40', { idleStopMs: IDLE_MS, stopGraceMs: 2000 }),
        },
        comfy: {
          engine: 'comfyui', types: ['image'], memoryMB: 64,
          settings: {
            url: comfy.url, workflow: WORKFLOW,
            inputs: { prompt: { node: '6', field: 'text' }, seed: { node: '3', field: 'seed' }, steps: { node: '3', field: 'steps' }, width: { node: '5', field: 'width' }, height: { node: '5', field: 'height' } },
          },
        },
        whisper: { engine: 'whisper-cpp', types: ['image'], settings: { url: 'http://127.0.0.1:9' } },
      },
    },
  });
  await events.open(mesh.url, mesh.admin);
}, 120_000);

afterAll(async () => {
  await events.close();
  await mesh?.stop();
  await comfy?.stop();
  removeDir(data);
});

/** The sd.cpp stand-ins running now: children of `gpumesh up`, whose local agent runs in its own process. */
const sdServers = (): number[] => childrenOf(mesh.process.pid!, 'sdcpp-standin').map((process) => process.pid);

/**
 * `GET /v1/events`, open for the whole file: every job event as the orchestrator published it, so a job's
 * events are all seen however soon after its submission they happen.
 */
class EventLog {
  readonly #events: JobEvent[] = [];
  readonly #listeners = new Set<(event: JobEvent) => void>();
  readonly #controller = new AbortController();
  #done: Promise<void> = Promise.resolve();
  #opened = false;

  async open(url: string, grant: string): Promise<void> {
    const response = await fetch(`${url}/v1/events`, { headers: { authorization: `Bearer ${grant}` }, signal: this.#controller.signal });
    this.#done = (async () => {
      const decoder = new TextDecoder();
      let buffer = '';
      for await (const chunk of response.body!) {
        buffer += decoder.decode(chunk as Uint8Array, { stream: true });
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          const data = buffer.slice(0, end).split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trim()).join('\n');
          buffer = buffer.slice(end + 2);
          this.#opened = true;
          const event = data ? JSON.parse(data) as JobEvent : null;
          if (event && 'jobId' in event) {
            this.#events.push(event);
            for (const listener of this.#listeners) listener(event);
          }
        }
      }
    })().catch(() => {});
    await waitFor(() => this.#opened, { what: '/v1/events to open' });
  }

  of(jobId: string): JobEvent[] {
    return this.#events.filter((event) => event.jobId === jobId);
  }

  onEvent(listener: (event: JobEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async close(): Promise<void> {
    this.#controller.abort();
    await this.#done;
  }
}
const events = new EventLog();

/** Submit an image job for `model` and wait for its end; its events as /v1/events carried them. */
async function run(model: string, input: Record<string, unknown>, onEvent: (event: JobEvent) => void = () => {}): Promise<{ id: string; events: JobEvent[] }> {
  let id = '';
  const early: JobEvent[] = [];
  const stop = events.onEvent((event) => (id ? event.jobId === id && onEvent(event) : early.push(event)));
  try {
    id = (await mesh.client().submit({ type: 'image', model, input: { seed: 3, width: 64, height: 64, ...input } })).id;
    for (const event of early) if (event.jobId === id) onEvent(event);
    await waitFor(() => events.of(id).some((event) => ['succeeded', 'failed', 'cancelled', 'expired'].includes(event.type)), { timeoutMs: 90_000, what: `job ${id} to end` });
  } finally {
    stop();
  }
  return { id, events: events.of(id) };
}

const loadingOf = (events: JobEvent[]) => events.filter((event): event is Extract<JobEvent, { type: 'loading' }> => event.type === 'loading');

describe('a model declared in mesh.yaml on a server the agent starts (sd.cpp stand-in)', () => {
  it('hello lists every registered engine; a model no connected host can run says why in the status', async () => {
    const status = await mesh.client().request<{ hosts: { engines: string[] }[]; queues: Record<string, { blocked: string | null }> }>('GET', '/v1/status');
    expect(status.hosts[0]!.engines).toEqual(['onnx', 'sdcpp', 'openai-images', 'comfyui', 'oip', 'exec']);
    expect(status.queues.sd!.blocked).toBeNull();
    expect(status.queues.whisper!.blocked).toMatch(/no connected host runs the "whisper-cpp" engine \(.* runs onnx, sdcpp/);
    const { id } = await mesh.client().submit({ type: 'image', model: 'whisper', input: { prompt: 'never runs' } });
    await waitFor(() => readFileSync(join(data, 'logs', 'orchestrator.log'), 'utf8').includes('jobs for model \\"whisper\\" wait: no connected host runs the \\"whisper-cpp\\" engine'),
      { what: 'the orchestrator to log why the job waits' });
    await mesh.client().request('DELETE', `/v1/jobs/${id}`);
  });

  it('the first job starts it, waits for readiness and succeeds, with a loading phase and its time; idle, the server and its cgroup go; the next job starts it again', async () => {
    expect(sdServers()).toEqual([]);
    const first = await run('sd', { prompt: 'a lighthouse at dusk' });
    expect(first.events.map((event) => event.type)).toEqual(['queued', 'dispatched', 'loading', 'loading', 'running', ...first.events.slice(5, -1).map(() => 'progress'), 'succeeded']);
    const [began, loaded] = loadingOf(first.events);
    expect(began).toMatchObject({ model: 'sd', host: expect.any(String) });
    expect(began).not.toHaveProperty('loadMs');
    expect(loaded!.loadMs).toBeGreaterThan(0);
    // Where the load went, as the agent measured it: the server's spawn and readiness among the phases.
    expect(loaded!.phases).toMatchObject({ pullMs: expect.any(Number), evictMs: expect.any(Number), spawnMs: expect.any(Number), readyMs: expect.any(Number), initMs: expect.any(Number) });
    expect(loaded!.phases!.readyMs).toBeGreaterThan(0);
    const view = await mesh.client().job(first.id);
    expect(view.attempts[0]!.loadMs).toBe(loaded!.loadMs);
    expect(view.input).toMatchObject({ steps: 3 }); // the model's own default (params.defaultSteps)
    const png = await sharp(await mesh.client().download(view.artifacts[0]!.url)).metadata();
    expect([png.format, png.width, png.height]).toEqual(['png', 64, 64]);

    // The server runs with the model's file as the agent pulled it (by digest, into its cache), in a cgroup of its own.
    const [pid] = sdServers();
    expect(pid).toBeDefined();
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    const modelPath = cmdline[cmdline.indexOf('--model') + 1]!;
    expect(modelPath).toMatch(new RegExp(`^${join(data, 'agent', 'models')}/sha256-[0-9a-f]{64}$`));
    expect(readFileSync(modelPath, 'utf8')).toBe(readFileSync(weights, 'utf8'));
    const cgroups = agentCgroupDirs(pid!);
    // Where the agent governs with cgroups (root here), the server has its own; without them, its process group only.
    if (!readFileSync(join(data, 'logs', 'agent.log'), 'utf8').includes('process governance without cgroups')) expect(cgroups.length).toBeGreaterThan(0);

    // A second job soon after finds it resident: no loading phase, the same server.
    const warm = await run('sd', { prompt: 'a second one' });
    expect(loadingOf(warm.events)).toEqual([]);
    expect(sdServers()).toEqual([pid]);

    // Idle for its window: the model is unloaded and its server stopped — the process and its cgroup are gone.
    await waitFor(() => !isAlive(pid!), { timeoutMs: IDLE_MS + 15_000, what: 'the idle server to stop' });
    for (const dir of cgroups) await waitFor(() => !existsSync(dir), { timeoutMs: 5000, what: `${dir} to be removed` });
    expect(sdServers()).toEqual([]);

    // From zero again: the next job starts a fresh server.
    const again = await run('sd', { prompt: 'from zero again' });
    expect(again.events.at(-1)!.type).toBe('succeeded');
    expect(loadingOf(again.events)[1]!.loadMs).toBeGreaterThan(0);
    expect(sdServers()).toHaveLength(1);
    expect(sdServers()).not.toContain(pid);
  }, 120_000);

  it('a server that crashes mid-batch: the batch fails over, the job succeeds on a fresh server, and so does the next', async () => {
    let killed: number | null = null;
    const crashed = await run('sd', { prompt: 'a long one', steps: 32 }, (event) => {
      if (event.type === 'progress' && killed === null) {
        const [pid] = sdServers();
        if (pid) {
          killed = pid;
          process.kill(pid, 'SIGKILL');
        }
      }
    });
    expect(killed).not.toBeNull();
    expect(crashed.events.at(-1)!.type).toBe('succeeded');
    const view = await mesh.client().job(crashed.id);
    expect(view.attempts[0]).toMatchObject({ status: 'failed', error: { code: 'ENGINE_CRASHED' } });
    expect(view.attempts[0]!.error!.message).toMatch(/killed by SIGKILL/);
    expect(view.attempts.at(-1)).toMatchObject({ status: 'succeeded' });
    expect(view.attempts.at(-1)!.loadMs).toBeGreaterThan(0); // the retry waited for a fresh server
    const next = await run('sd', { prompt: 'after the crash' });
    expect(next.events.at(-1)!.type).toBe('succeeded');
    expect(sdServers()).not.toContain(killed);
    expect(readFileSync(join(data, 'logs', 'agent.log'), 'utf8')).toContain('engine process died; model dropped');
  }, 120_000);
});

describe('a model declared in mesh.yaml on a server the person runs (a fronted ComfyUI stand-in)', () => {
  it('runs its jobs there: no process started, the workflow filled with the job\'s inputs', async () => {
    const before = childrenOf(mesh.process.pid!).length;
    const { id, events: seen } = await run('comfy', { prompt: 'a fronted cat', width: 48, height: 40, steps: 2 });
    expect(seen.at(-1)!.type).toBe('succeeded');
    // The model still loads (the agent checks the server and the workflow), in no time to speak of.
    expect(loadingOf(seen).map((event) => event.loadMs === undefined)).toEqual([true, false]);
    const view = await mesh.client().job(id);
    const png = await sharp(await mesh.client().download(view.artifacts[0]!.url)).metadata();
    expect([png.width, png.height]).toEqual([48, 40]);
    const state = await comfy.state<{ submitted: string[] }>();
    expect(state.submitted.length).toBeGreaterThan(0);
    expect(childrenOf(mesh.process.pid!).length).toBe(before);
  }, 60_000);
});

