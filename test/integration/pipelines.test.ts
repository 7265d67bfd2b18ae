import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ApiError, MeshClient } from '../../src/cli/common/client.js';
import { ExplainView, PipelineAccepted, PipelineView, type JobView } from '../../src/protocol/api/index.js';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';

/**
 * One result feeds the next on another machine, through real processes: `gpumesh serve` and two agents, `laptop` of
 * class image and `westbox` of class video. A pipeline picture → clip makes the picture on the laptop and the clip on
 * the west box, the clip starting from the picture (its poster, frame 0, resembles it); a source that does not succeed
 * fails its dependent at once with the cause; cancelling a pipeline cancels what has not ended; a step released after its
 * source is held to its grant's caps then; a grant that cannot read a job cannot take its output.
 */
const data = tempDir('gpumesh-pipelines-');
let serve: Proc;
let url: string;
let admin: MeshClient;
const agents: Proc[] = [];

async function startAgent(host: string, klass: string): Promise<void> {
  const { token } = await admin.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host, classes: [klass] });
  agents.push(gpumesh(['agent', '--url', url, '--host', host, '--classes', klass, '--data', join(data, `agent-${host}`), '--cpu-budget', '1024'], { GPUMESH_GRANT: token }));
}

beforeAll(async () => {
  writeFileSync(join(data, 'mesh.yaml'), stringify({ routing: { image: ['image'], video: ['video'] } }));
  serve = gpumesh(['serve', '--data', data, '--port', '0']);
  await waitFor(() => {
    if (serve.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${serve.output()}`);
    return existsSync(join(data, 'orchestrator.url')) && existsSync(join(data, 'admin.grant'));
  }, { timeoutMs: 60_000, what: 'gpumesh serve to listen' });
  url = readFileSync(join(data, 'orchestrator.url'), 'utf8').trim();
  await waitHealthy(url);
  admin = new MeshClient(url, readFileSync(join(data, 'admin.grant'), 'utf8').trim());
  await startAgent('laptop', 'image');
  await startAgent('westbox', 'video');
  await waitFor(async () => (await admin.request<{ hosts: { connected: boolean }[] }>('GET', '/v1/hosts')).hosts.filter((host) => host.connected).length === 2,
    { timeoutMs: 60_000, what: 'both agents to join' });
}, 120_000);

afterAll(async () => {
  for (const agent of agents) await agent.kill();
  await serve?.kill();
  removeDir(data);
});

const picture = { prompt: 'a lighthouse at dusk', seed: 11, width: 64, height: 64, steps: 6 };
const clip = (extra: Record<string, unknown> = {}) => ({ prompt: 'waves', seed: 5, frames: 4, fps: 4, width: 64, height: 64, steps: 6, ...extra });

const pipelineDone = (id: string, client = admin): Promise<PipelineView> => waitFor(async () => {
  const view = await client.request<PipelineView>('GET', `/v1/pipelines/${id}`);
  return view.status === 'running' ? null : view;
}, { timeoutMs: 120_000, what: `pipeline ${id} to end` });

async function rgb(digest: string): Promise<Buffer> {
  return sharp(Buffer.from(await admin.download(`/v1/blobs/${digest}`))).removeAlpha().resize(64, 64).raw().toBuffer();
}

const meanDifference = (a: Uint8Array, b: Uint8Array): number => {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
  return sum / a.length;
};

/** An SSE stream read to its end (or until `until`): its events' types and job ids. */
async function readEvents(path: string): Promise<{ type: string; jobId: string }[]> {
  const response = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${readFileSync(join(data, 'admin.grant'), 'utf8').trim()}` } });
  expect(response.status).toBe(200);
  const text = await response.text();
  return text.split('\n\n').flatMap((block) => {
    const type = /^event: (.+)$/m.exec(block)?.[1];
    const json = /^data: (.+)$/m.exec(block)?.[1];
    return type && json ? [{ type, jobId: (JSON.parse(json) as { jobId: string }).jobId }] : [];
  });
}

describe('pipelines across two hosts', () => {
  it('picture → clip: the picture on the image host, the clip on the video host, its first frame derived from the picture', async () => {
    const accepted = await admin.request<PipelineAccepted>('POST', '/v1/pipelines', {
      steps: [
        { id: 'picture', type: 'image', input: picture },
        { id: 'clip', type: 'video', input: clip({ image: { fromStep: 'picture', output: 0 }, strength: 0.3 }) },
      ],
    });
    // The answers are what the OpenAPI document says they are, strictly.
    PipelineAccepted.parse(accepted);
    const [pictureStep, clipStep] = accepted.steps;
    expect(pictureStep!.id).toBe('picture');
    expect(['queued', 'dispatched', 'running']).toContain(pictureStep!.status);
    expect(clipStep).toMatchObject({ id: 'clip', status: 'waiting' });
    const events = readEvents(accepted.links.events);
    // While the picture is made, the clip waits for it, and says so.
    const explained = ExplainView.parse(await admin.request<ExplainView>('GET', `/v1/jobs/${clipStep!.jobId}/explain`));
    if (explained.status === 'waiting') {
      expect(explained.waiting).toMatchObject({ for: 'its source jobs' });
      expect(explained.summary).toContain(`job ${pictureStep!.jobId}`);
    }

    const done = await pipelineDone(accepted.id);
    PipelineView.parse(done);
    expect(done.status, JSON.stringify(done.steps.map((step) => step.job.error))).toBe('succeeded');
    const [made, animated] = done.steps.map((step) => step.job) as [JobView, JobView];
    expect(made.attempts.map((attempt) => attempt.host)).toEqual(['laptop']);
    expect(animated.attempts.map((attempt) => attempt.host)).toEqual(['westbox']);
    expect(animated.attempts[0]!.route).toMatchObject({ host: 'westbox', class: 'video' });
    // The output moved by digest: the clip's input names the picture's.
    const pictureDigest = made.artifacts[0]!.digest;
    expect(animated.input.image).toBe(pictureDigest);
    const explainedAfter = await admin.request<ExplainView>('GET', `/v1/jobs/${animated.id}/explain`);
    expect(explainedAfter.summary).toBe('succeeded after 1 attempt');
    expect(explainedAfter.attempts[0]).toMatchObject({ host: 'westbox', route: { class: 'video' } });

    // Every step's events on one stream, which ends when both have.
    const heard = await events;
    expect(heard).toEqual(expect.arrayContaining([
      { type: 'succeeded', jobId: made.id }, { type: 'succeeded', jobId: animated.id }, { type: 'running', jobId: animated.id },
    ]));

    // The clip's first frame (its poster) resembles the picture far more than the same clip made without it does.
    const poster = (job: JobView): string => job.artifacts.find((artifact) => artifact.mediaType === 'image/png')!.digest;
    const plain = await admin.submit({ type: 'video', input: clip() });
    expect((await admin.follow(plain.id)).type).toBe('succeeded');
    const plainJob = await admin.request<JobView>('GET', `/v1/jobs/${plain.id}`);
    const source = await rgb(pictureDigest);
    const withPicture = meanDifference(await rgb(poster(animated)), source);
    const without = meanDifference(await rgb(poster(plainJob)), source);
    expect(withPicture).toBeLessThan(without);
    expect(withPicture).toBeLessThan(without * 0.75);
  }, 180_000);

  it('a job by reference through /v1/jobs, the bulk route and the CLI; a source that already succeeded is taken at once', async () => {
    const first = await admin.submit({ type: 'image', input: { ...picture, seed: 12 } });
    const waiting = await admin.request<{ id: string; status: string }>('POST', '/v1/jobs', { type: 'video', input: clip({ image: { fromJob: first.id, output: 0 } }) });
    // Waiting while its source runs; if the source already succeeded (a quick picture on a quick machine), queued — and
    // dispatched already, when the clip's host is free, as any 202 of a job that found a free host says.
    expect(['waiting', 'queued', 'dispatched']).toContain(waiting.status);
    expect((await admin.follow(waiting.id)).type).toBe('succeeded');
    const sourceJob = await admin.request<JobView>('GET', `/v1/jobs/${first.id}`);
    const bulk = await admin.request<{ results: { status: number; id: string; jobStatus: string }[] }>('POST', '/v1/jobs:batch', {
      jobs: [{ type: 'video', input: clip({ image: { fromJob: first.id, output: 0 } }) }, { type: 'video', input: clip({ image: { fromJob: first.id, output: 3 } }) }],
    });
    expect(bulk.results[0]).toMatchObject({ status: 202, jobStatus: 'queued' });
    expect(bulk.results[1]).toMatchObject({ status: 400, error: { code: 'BAD_REFERENCE' } });
    const taken = await admin.request<JobView>('GET', `/v1/jobs/${bulk.results[0]!.id}`);
    expect(taken.input.image).toBe(sourceJob.artifacts[0]!.digest);

    const cli = await gpumeshRun(['submit', '--type', 'video', '--frames', '2', '--fps', '2', '--size', '32x32', '--steps', '1', '--prompt', 'from the cli', '--input', `image=@${first.id}`, '--json'],
      { GPUMESH_HOME: data, GPUMESH_URL: url });
    expect(cli.code, cli.output).toBe(0);
    const cliJob = JSON.parse(cli.output.slice(cli.output.indexOf('{'))) as { id: string };
    expect((await admin.request<JobView>('GET', `/v1/jobs/${cliJob.id}`)).input.image).toBe(sourceJob.artifacts[0]!.digest);
  }, 120_000);

  it('a first step that does not succeed fails the second at once, naming it and its cause', async () => {
    // A picture too slow for its deadline: it expires, and the clip that takes it fails with it.
    const accepted = await admin.request<PipelineAccepted>('POST', '/v1/pipelines', {
      steps: [
        { id: 'picture', type: 'image', input: { prompt: 'too slow', width: 1024, height: 1024, steps: 32 }, timeoutMs: 300 },
        { id: 'clip', type: 'video', input: clip({ image: { fromStep: 'picture' } }) },
      ],
    });
    const done = await pipelineDone(accepted.id);
    const [source, dependent] = done.steps.map((step) => step.job) as [JobView, JobView];
    expect(source.status).toBe('expired');
    expect(done.status).toBe('expired');
    expect(dependent.status).toBe('failed');
    expect(dependent.attempts).toEqual([]);
    expect(dependent.error!.code).toBe('SOURCE_FAILED');
    expect(dependent.error!.message).toContain(`Source job ${source.id} ended expired`);
    expect(dependent.error!.message).toContain('input.image');
  }, 120_000);

  it('cancel mid-pipeline: the step running and the step waiting are both cancelled', async () => {
    const accepted = await admin.request<PipelineAccepted>('POST', '/v1/pipelines', {
      steps: [
        { id: 'picture', type: 'image', input: { prompt: 'a long one', width: 1024, height: 1024, steps: 32 } },
        { id: 'clip', type: 'video', input: clip({ image: { fromStep: 'picture' } }) },
      ],
    });
    await waitFor(async () => (await admin.request<JobView>('GET', `/v1/jobs/${accepted.steps[0]!.jobId}`)).status === 'running', { timeoutMs: 30_000, what: 'the picture to run' });
    // The clip waits for the picture, and explain says so, naming it.
    const explained = ExplainView.parse(await admin.request<ExplainView>('GET', `/v1/jobs/${accepted.steps[1]!.jobId}/explain`));
    expect(explained).toMatchObject({ status: 'waiting', waiting: { for: 'its source jobs', position: null } });
    expect(explained.summary).toBe(`waiting for its source jobs: job ${accepted.steps[0]!.jobId} (running) to succeed; it then runs by its own type, on video`);
    const listed = await admin.request<{ jobs: JobView[] }>('GET', '/v1/jobs?status=waiting');
    expect(listed.jobs.map((job) => job.id)).toEqual([accepted.steps[1]!.jobId]);
    const cancelled = await admin.request<PipelineView>('DELETE', `/v1/pipelines/${accepted.id}`);
    expect(cancelled.steps.map((step) => step.job.status)).toEqual(['cancelled', 'cancelled']);
    expect(cancelled.status).toBe('cancelled');
  }, 60_000);

  it('a step released once its source succeeded is held to its grant\'s caps then: past device-seconds-per-day it fails as a submit would be refused', async () => {
    const { token } = await admin.request<{ token: string }>('POST', '/v1/grants', { kind: 'client', deviceSecondsPerDay: 1 });
    const capped = new MeshClient(url, token);
    // The picture is admitted while the day's use is below the cap, and takes more than the second the cap allows.
    const accepted = await capped.request<PipelineAccepted>('POST', '/v1/pipelines', {
      steps: [
        { id: 'picture', type: 'image', input: { prompt: 'a large one', seed: 3, width: 512, height: 512, steps: 32 } },
        { id: 'clip', type: 'video', input: clip({ image: { fromStep: 'picture' } }) },
      ],
    });
    const done = await pipelineDone(accepted.id, capped);
    const [made, animated] = done.steps.map((step) => step.job) as [JobView, JobView];
    expect(made.status).toBe('succeeded');
    expect(made.attempts[0]!.computeMs!).toBeGreaterThan(1000);
    expect(animated.status).toBe('failed');
    expect(animated.attempts).toEqual([]);
    expect(animated.error).toMatchObject({ code: 'DEVICE_TIME_CAP_REACHED', message: expect.stringContaining('"device-seconds-per-day 1"') });
    // The cap is the lineage's: a submit now is refused with the same code.
    const refused = await capped.request('POST', '/v1/jobs', { type: 'image', input: picture }).catch((error: unknown) => error);
    expect((refused as ApiError).status).toBe(429);
    expect((refused as ApiError).message).toContain('device-seconds-per-day 1');
  }, 180_000);

  it('a grant that cannot read the source cannot take its output', async () => {
    const source = await admin.submit({ type: 'image', input: { ...picture, seed: 13 } });
    const { token } = await admin.request<{ token: string }>('POST', '/v1/grants', { kind: 'client', types: ['video'] });
    const videoOnly = new MeshClient(url, token);
    const refusal = await videoOnly.request('POST', '/v1/jobs', { type: 'video', input: clip({ image: { fromJob: source.id, output: 0 } }) }).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(ApiError);
    expect((refusal as ApiError).status).toBe(404);
    expect((refusal as ApiError).message).toContain(`Job ${source.id} (input.image.fromJob)`);
    // Nor in a pipeline where a step it may not read feeds one it may submit.
    const piped = await videoOnly.request('POST', '/v1/pipelines', {
      steps: [{ id: 'picture', type: 'image', input: picture }, { id: 'clip', type: 'video', input: clip({ image: { fromStep: 'picture' } }) }],
    }).catch((error: unknown) => error);
    expect((piped as ApiError).status).toBe(403);
  }, 60_000);
});
