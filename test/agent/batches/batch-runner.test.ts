import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { BatchRunner, type Result } from '../../../src/agent/batches/batch-runner.js';
import type { BatchResult, EngineJob, LoadedModel } from '../../../src/agent/core/engine.js';
import { InputPictures } from '../../../src/agent/batches/input-pictures.js';
import type { Residency } from '../../../src/agent/models/residency.js';
import type { AgentMessage, ModelManifest, OrchestratorMessage } from '../../../src/protocol/index.js';
import { ServerTrust } from '../../../src/tls-client/index.js';

type Run = Extract<OrchestratorMessage, { type: 'run' }>;
const manifest = { name: 'gen', version: '1', engine: 'onnx', digest: 'sha256:x', bytes: 1, memoryMB: 1, jobTypes: ['image'], params: {} } as ModelManifest;
const run = (batchId: string, jobIds: string[], probe = false): Run => ({
  type: 'run', batchId, model: manifest, uploadCredential: 'upload', jobs: jobIds.map((id) => ({ id, input: { prompt: 'x' }, deadlineAt: null })), ...(probe ? { probe } : {}),
});

/** The orchestrator's upload route on a real socket, holding every upload until the test lets it through. */
async function heldUploads(): Promise<{ url: string; arrived: string[]; release(): void; server: Server }> {
  const arrived: string[] = [];
  const held: Array<() => void> = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    request.resume();
    request.on('end', () => {
      arrived.push(request.url ?? '');
      held.push(() => response.writeHead(201, { 'content-type': 'application/json' }).end('{}'));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, arrived, release: () => held.splice(0).forEach((answer) => answer()), server };
}

/**
 * The runner around a stand-in engine (what it computes does not matter here; when the runner says what, does): each
 * job gets the outputs `outputsOf` gives it.
 */
function runner(url: string, outputsOf: (job: EngineJob) => BatchResult['outputs'][number]) {
  const events: string[] = [];
  const loaded = {
    manifest, device: { id: 'cpu', kind: 'cpu', name: 'cpu', memoryTotalMB: 1024, budgetMB: 1024, usedMB: 0 }, memoryMB: 1, exited: new Promise<string>(() => {}),
    run: async (jobs: readonly EngineJob[]): Promise<BatchResult> => ({ outputs: jobs.map(outputsOf) }),
    cancel: () => {}, unload: async () => {},
  } as unknown as LoadedModel;
  const residency = {
    acquire: async () => ({ loaded, loadMs: 0 }),
    release: () => {},
    recordBatch: () => ({ residentMB: 1, peakMB: 1 }),
  } as unknown as Residency;
  const trust = new ServerTrust(url);
  const batches = new BatchRunner({
    residency, pictures: new InputPictures(async () => new Response(null, { status: 404 })), log: pino({ level: 'silent' }), reportDelayMs: 0,
    send: (message: AgentMessage) => events.push(message.type),
    report: (result: Result) => events.push(`${result.type} ${result.jobId}`),
    deliver: { target: () => ({ url, trust }), inlineBytes: () => 8 },
    computed: (batchId) => events.push(`computed ${batchId}`),
    ended: () => events.push('ended'),
  });
  return { batches, events };
}

let server: Server | null = null;
afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

describe('BatchRunner, around a stand-in engine', () => {
  it('says the batch is computed as soon as the engine is done, while its outputs are still being uploaded', async () => {
    const uploads = await heldUploads();
    server = uploads.server;
    const { batches, events } = runner(uploads.url, (job) => ({ jobId: job.id, ok: true, files: [{ bytes: new Uint8Array(64).fill(7), mediaType: 'image/png', width: 4, height: 4 }] }));
    const ran = batches.run(run('b1', ['j1', 'j2']));
    for (let i = 0; i < 100 && uploads.arrived.length < 2; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(uploads.arrived).toHaveLength(2);
    // Both uploads are held: no result yet, but the orchestrator was told the engine is free.
    expect(events).toEqual(['started', 'computed b1']);
    uploads.release();
    await ran;
    expect(events.slice(2).sort()).toEqual(['done j1', 'done j2', 'ended'].sort());
  });

  it('says nothing of the kind for results without files, which follow at once, nor for a health probe', async () => {
    const uploads = await heldUploads();
    server = uploads.server;
    const tensors = runner(uploads.url, (job) => ({ jobId: job.id, ok: true, files: [], result: { sum: 1 } }));
    await tensors.batches.run(run('b1', ['j1']));
    expect(tensors.events).toEqual(['started', 'done j1', 'ended']);
    const probe = runner(uploads.url, (job) => ({ jobId: job.id, ok: true, files: [{ bytes: new Uint8Array(64), mediaType: 'image/png', width: 4, height: 4 }] }));
    await probe.batches.run(run('p1', ['probe'], true));
    expect(probe.events).toEqual(['started', 'done probe', 'ended']);
    expect(uploads.arrived).toEqual([]);
  });
});
