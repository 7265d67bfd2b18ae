import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { LINK_PATH, LINK_PROTOCOL_VERSION, type OrchestratorMessage } from '../../src/protocol/index.js';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { scriptedPng } from '../helpers/scripted-agent.js';

/**
 * The agent link driven by hand: a scripted agent that speaks the protocol
 * over a real WebSocket — and misbehaves on purpose (duplicate and late
 * results, outputs it never uploaded, bytes that do not match their digest).
 */
let mesh: RunningMesh;
let grant: string;

beforeAll(async () => {
  mesh = await startMesh({ args: ['--no-agent'] });
  grant = (await mesh.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'scripted', classes: ['image'] })).token;
});
afterAll(async () => {
  await mesh?.stop();
  removeDir(mesh.data);
});

class ScriptedAgent {
  readonly socket: WebSocket;
  readonly inbox: OrchestratorMessage[] = [];

  constructor(host = 'scripted', token = grant, classes = ['image']) {
    const url = new URL(LINK_PATH, mesh.url);
    url.protocol = 'ws:';
    this.socket = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
    this.socket.on('message', (data) => {
      const message = JSON.parse(data.toString()) as OrchestratorMessage;
      // The autoscaler places a replica here before it sends batches: answer as an agent that loaded it.
      if (message.type === 'load') {
        this.send({ type: 'loaded', model: message.model.name, digest: message.model.digest, device: 'cpu', memoryMB: message.model.memoryMB });
        return;
      }
      this.inbox.push(message);
    });
    this.socket.once('open', () => this.send({
      type: 'hello', protocol: LINK_PROTOCOL_VERSION, host, classes, engines: ['onnx'], models: [], inFlight: [],
      devices: [{ id: 'cpu', kind: 'cpu', name: 'scripted', memoryTotalMB: 8192, budgetMB: 4096, usedMB: 0 }], concurrency: 1, version: 'test',
    }));
  }

  send(message: unknown): void {
    this.socket.send(JSON.stringify(message));
  }

  async next<T extends OrchestratorMessage['type']>(type: T): Promise<Extract<OrchestratorMessage, { type: T }>> {
    const found = await waitFor(() => {
      const index = this.inbox.findIndex((message) => message.type === type);
      return index < 0 ? null : this.inbox.splice(index, 1)[0];
    }, { what: `a ${type} message` });
    return found as Extract<OrchestratorMessage, { type: T }>;
  }

  async close(): Promise<void> {
    this.socket.close();
    await once(this.socket, 'close');
  }
}

async function upload(jobId: string, uploadGrant: string, bytes: Buffer, digest?: string): Promise<Response> {
  const name = digest ?? `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  return fetch(`${mesh.url}/v1/jobs/${jobId}/outputs/${name}`, {
    method: 'PUT', body: new Uint8Array(bytes), headers: { authorization: `Bearer ${uploadGrant}`, 'content-type': 'image/png' },
  });
}

describe('the agent link with a scripted agent', () => {
  it('accepts a result once: duplicates and late reports change nothing', async () => {
    const agent = new ScriptedAgent();
    await agent.next('welcome');
    const { id } = await mesh.client().submit({ type: 'image', input: { prompt: 'scripted', width: 8, height: 8, steps: 1 } });
    const run = await agent.next('run');
    expect(run.jobs.map((job) => job.id)).toEqual([id]);
    const [job] = run.jobs;
    const bytes = scriptedPng('an output with a digest');
    const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

    const mismatch = await upload(id, run.uploadCredential, bytes, `sha256:${'0'.repeat(64)}`);
    expect(mismatch.status).toBe(400);
    expect(((await mismatch.json()) as { error: { code: string } }).error.code).toBe('DIGEST_MISMATCH');
    // The credential covers the jobs of its batch only.
    const queued = await mesh.client().submit({ type: 'image', input: { prompt: 'not in that batch', width: 8, height: 8, steps: 1 } });
    const otherJob = await upload(queued.id, run.uploadCredential, bytes);
    expect(otherJob.status).toBe(403);
    expect(((await otherJob.json()) as { error: { message: string } }).error.message).toContain('is not running in that batch');
    const forged = await upload(id, run.uploadCredential.replace(/.$/, (last) => (last === 'A' ? 'B' : 'A')), bytes);
    expect(forged.status).toBe(401);
    await mesh.client().request('DELETE', `/v1/jobs/${queued.id}`);
    expect((await upload(id, run.uploadCredential, bytes)).status).toBe(201);

    agent.send({ type: 'started', batchId: run.batchId, jobIds: [id] });
    const done = { type: 'done', jobId: id, batchId: run.batchId, artifacts: [{ digest, mediaType: 'image/png', bytes: bytes.length }], timings: { loadMs: 0, computeMs: 1, totalMs: 2 } };
    agent.send(done);
    agent.send(done);
    agent.send({ type: 'failed', jobId: id, batchId: run.batchId, retryable: true, error: { code: 'ENGINE_FAILED', message: 'too late' } });
    expect((await mesh.client().follow(id)).type).toBe('succeeded');
    await waitFor(() => agent.inbox.filter((message) => message.type === 'ack').length >= 1, { what: 'acks' });
    const view = await mesh.client().job(id);
    expect(view.status).toBe('succeeded');
    expect(view.artifacts.map((artifact) => artifact.digest)).toEqual([digest]);
    expect(view.attempts).toHaveLength(1);
    await agent.close();
  });

  it('small outputs travel inline in done: stored by digest and verified; a lying inline output fails the attempt', async () => {
    const agent = new ScriptedAgent();
    const welcome = await agent.next('welcome');
    expect(welcome.inlineOutputBytes).toBeGreaterThan(1000);
    const { id } = await mesh.client().submit({ type: 'image', input: { prompt: 'inline', width: 8, height: 8, steps: 1 } });
    const first = await agent.next('run');
    const bytes = scriptedPng(`inline output ${id}`);
    const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    const timings = { loadMs: 0, computeMs: 1, totalMs: 1 };
    // Bytes that do not hash to the digest they claim are refused, and the job is tried again.
    agent.send({ type: 'done', jobId: id, batchId: first.batchId, timings, artifacts: [{ digest, mediaType: 'image/png', bytes: bytes.length, inline: Buffer.from('other bytes!!').toString('base64') }] });
    const second = await agent.next('run');
    agent.send({ type: 'done', jobId: id, batchId: second.batchId, timings, artifacts: [{ digest, mediaType: 'image/png', bytes: bytes.length, inline: bytes.toString('base64') }] });
    expect((await mesh.client().follow(id)).type).toBe('succeeded');
    const view = await mesh.client().job(id);
    expect(view.attempts.map((attempt) => attempt.error?.code ?? attempt.status)).toEqual(['INTEGRITY_FAILED', 'succeeded']);
    expect(view.artifacts.map((artifact) => artifact.digest)).toEqual([digest]);
    expect(Buffer.from(await mesh.client().download(view.artifacts[0]!.url)).equals(bytes)).toBe(true);
    await agent.close();
  });

  it('a reported output that was never uploaded fails the attempt and the job is tried again', async () => {
    const agent = new ScriptedAgent();
    await agent.next('welcome');
    const { id } = await mesh.client().submit({ type: 'image', input: { prompt: 'liar', width: 8, height: 8, steps: 1 } });
    const first = await agent.next('run');
    agent.send({ type: 'done', jobId: id, batchId: first.batchId, artifacts: [{ digest: `sha256:${'1'.repeat(64)}`, mediaType: 'image/png', bytes: 1 }], timings: { loadMs: 0, computeMs: 1, totalMs: 1 } });
    const second = await agent.next('run');
    expect(second.jobs[0]!.id).toBe(id);
    expect(second.batchId).not.toBe(first.batchId);
    agent.send({ type: 'failed', jobId: id, batchId: second.batchId, retryable: false, error: { code: 'INVALID_INPUT', message: 'the input is at fault' } });
    const terminal = await mesh.client().follow(id);
    expect(terminal.type).toBe('failed');
    const view = await mesh.client().job(id);
    expect(view.attempts.map((attempt) => attempt.error?.code)).toEqual(['INTEGRITY_FAILED', 'INVALID_INPUT']);
    expect(view.error?.code).toBe('INVALID_INPUT');
    await agent.close();
  });

  it('a host that goes away mid-batch fails the attempt and the job moves to another host', async () => {
    const first = new ScriptedAgent();
    await first.next('welcome');
    const { id } = await mesh.client().submit({ type: 'image', input: { prompt: 'failover', width: 8, height: 8, steps: 1 } });
    await first.next('run');
    await first.close();
    const second = new ScriptedAgent();
    await second.next('welcome');
    const run = await second.next('run');
    expect(run.jobs[0]!.id).toBe(id);
    const view = await mesh.client().job(id);
    expect(view.attempts[0]).toMatchObject({ status: 'lost', error: { code: 'AGENT_LOST' } });
    await mesh.client().request('DELETE', `/v1/jobs/${id}`);
    expect((await second.next('cancel')).jobId).toBe(id);
    await second.close();
  });

  it('a rogue agent cannot decide jobs it was not given: its reports are refused, logged and counted', async () => {
    const honest = new ScriptedAgent();
    await honest.next('welcome');
    const rogueGrant = (await mesh.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'rogue', classes: ['video'] })).token;
    const rogue = new ScriptedAgent('rogue', rogueGrant, ['video']);
    await rogue.next('welcome');
    const running = await mesh.client().submit({ type: 'image', input: { prompt: 'mine', width: 8, height: 8, steps: 1 } });
    const queued = await mesh.client().submit({ type: 'image', input: { prompt: 'queued behind it', width: 8, height: 8, steps: 1 } });
    const run = await honest.next('run');
    expect(run.jobs[0]!.id).toBe(running.id);
    for (const jobId of [running.id, queued.id]) {
      rogue.send({ type: 'done', jobId, batchId: run.batchId, artifacts: [], result: 'forged', timings: { loadMs: 0, computeMs: 0, totalMs: 0 } });
      rogue.send({ type: 'failed', jobId, batchId: run.batchId, retryable: false, error: { code: 'INVALID_INPUT', message: 'forged' } });
    }
    rogue.send({ type: 'progress', batchId: run.batchId, jobIds: [running.id], step: 1, total: 1 });
    const metrics = await waitFor(async () => {
      const text = new TextDecoder().decode(await mesh.client().download('/metrics'));
      return /gpumesh_link_reports_refused_total\{host="rogue",message="progress"\} 1/.test(text) ? text : null;
    }, { what: 'the refused reports to be counted' });
    expect(metrics).toMatch(/gpumesh_link_reports_refused_total\{host="rogue",message="done"\} 2/);
    expect(metrics).toMatch(/gpumesh_link_reports_refused_total\{host="rogue",message="failed"\} 2/);
    expect((await mesh.client().job(running.id)).status).toBe('dispatched');
    expect((await mesh.client().job(queued.id)).status).toBe('queued');
    expect(honest.inbox.filter((message) => message.type === 'cancel')).toEqual([]);
    expect(mesh.output() + readFileSync(join(mesh.data, 'logs', 'orchestrator.log'), 'utf8')).toMatch(/refused \d+ reports? about jobs this host does not hold/);
    // The honest host still finishes its job.
    honest.send({ type: 'done', jobId: running.id, batchId: run.batchId, artifacts: [], timings: { loadMs: 0, computeMs: 1, totalMs: 1 } });
    expect((await mesh.client().follow(running.id)).type).toBe('succeeded');
    await mesh.client().request('DELETE', `/v1/jobs/${queued.id}`);
    await rogue.close();
    await honest.close();
  });

  it('closes the link on a malformed message and refuses a hello for another host', async () => {
    const malformed = new ScriptedAgent();
    await malformed.next('welcome');
    malformed.send({ type: 'heartbeat', inFlight: 'lots' });
    const [code] = await once(malformed.socket, 'close');
    expect(code).toBe(1008);
    const impostor = new ScriptedAgent('not-scripted');
    const [refused, reason] = await once(impostor.socket, 'close');
    expect(refused).toBe(4403);
    expect(reason.toString()).toContain('host "not-scripted" is not "scripted"');
  });
});
