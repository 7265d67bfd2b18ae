import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { PipelineEnds } from '../../../src/orchestrator/jobs/pipeline-ends.js';
import { SqliteStore, type JobRecord, type NewJob } from '../../../src/orchestrator/store/index.js';
import type { WebhookEvent } from '../../../src/orchestrator/webhooks/index.js';
import { PipelineEndSummary } from '../../../src/protocol/api/index.js';

/**
 * PipelineEnds on an in-memory SQLite: a pipeline's end is delivered once, when its last step ends, with the disarming
 * in the delivery's write; after a restart its watch is rebuilt from the stored jobs — and one whose steps all ended
 * while nothing watched is delivered at start.
 */
const URL = 'https://hooks.example.com/pipelines';

function setup() {
  const store = new SqliteStore(':memory:');
  const { commits } = store;
  const delivered: WebhookEvent[] = [];
  const ends = () => new PipelineEnds({
    store, commits, log: pino({ level: 'silent' }), jobs: { get: (id) => store.jobs.getJob(id) },
    webhooks: { deliver: (event, disarm) => { delivered.push(event); commits.write(() => disarm?.()); return null as never; } },
  });
  let n = 0;
  const job = (fields: Partial<NewJob> = {}): JobRecord => commits.write(() => store.jobs.insertJob({
    id: `j_${++n}`, type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], hosts: null, input: { prompt: 'p' },
    grantId: 'g1', idempotencyKey: null, createdAt: 1000, deadlineAt: null, ...fields,
  }));
  const finish = (record: JobRecord, status: 'succeeded' | 'failed' | 'cancelled', errorCode?: string): JobRecord => {
    commits.write(() => store.jobs.finishJob(record.seq, status, 2000 + record.seq, errorCode ? { errorCode, errorMessage: `${errorCode}: why` } : { result: null }));
    return { ...record, status, finishedAt: 2000 + record.seq };
  };
  const pipeline = (id: string, jobs: JobRecord[]) => ({ id, grantId: 'g1', createdAt: 1000, steps: jobs.map((record, index) => ({ id: `step${index}`, jobId: record.id })) });
  return { store, commits, delivered, ends, job, finish, pipeline };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 10));

describe('PipelineEnds', () => {
  it('delivers once, when the last step ends; the cause is the first step that failed of its own accord', async () => {
    const { store, commits, delivered, ends, job, finish, pipeline } = setup();
    const watcher = ends();
    const [a, b, c] = [job(), job(), job()];
    const record = pipeline('p_1', [a, b, c]);
    commits.write(() => { store.pipelines.insertPipeline(record); watcher.arm(record, URL); });
    expect(await store.webhooks.armedPipelines()).toEqual([{ pipelineId: 'p_1', url: URL }]);
    watcher.jobEnded(finish(a, 'succeeded'));
    watcher.jobEnded(finish(b, 'failed', 'ENGINE_FAILED'));
    await settle();
    expect(delivered).toEqual([]);
    // A job of no watched pipeline changes nothing.
    watcher.jobEnded(finish(job(), 'succeeded'));
    watcher.jobEnded(finish(c, 'failed', 'SOURCE_FAILED'));
    await settle();
    expect(delivered).toHaveLength(1);
    const [event] = delivered;
    expect(event).toMatchObject({ type: 'pipeline.failed', subject: { kind: 'pipeline', id: 'p_1' }, url: URL, at: 2000 + c.seq });
    const summary = PipelineEndSummary.parse(event!.data);
    expect(summary.steps.map((step) => step.status)).toEqual(['succeeded', 'failed', 'failed']);
    expect(summary.cause).toEqual({ step: 'step1', jobId: b.id, status: 'failed', error: { code: 'ENGINE_FAILED', message: 'ENGINE_FAILED: why' } });
    expect(await store.webhooks.armedPipelines()).toEqual([]);
  });

  it('after a restart: watches what is still open from the stored jobs, and delivers at once what ended unwatched', async () => {
    const { store, commits, delivered, ends, job, finish, pipeline } = setup();
    const [a, b, c, d] = [job(), job(), job(), job()];
    commits.write(() => {
      store.pipelines.insertPipeline(pipeline('p_open', [a, b]));
      store.pipelines.insertPipeline(pipeline('p_ended', [c, d]));
      store.webhooks.armPipeline('p_open', URL, 1000);
      store.webhooks.armPipeline('p_ended', URL, 1001);
      store.webhooks.armPipeline('p_gone', URL, 1002);
    });
    finish(a, 'succeeded');
    finish(c, 'succeeded');
    finish(d, 'cancelled', 'CANCELLED');
    const watcher = ends();
    expect(await watcher.start()).toEqual({ watched: 1, recovered: 1 });
    await settle();
    expect(delivered.map((event) => [event.subject.id, event.type])).toEqual([['p_ended', 'pipeline.cancelled']]);
    // A pipeline that is no longer stored is disarmed, not delivered.
    expect((await store.webhooks.armedPipelines()).map((armed) => armed.pipelineId)).toEqual(['p_open']);
    watcher.jobEnded(finish(b, 'succeeded'));
    await settle();
    expect(delivered.map((event) => [event.subject.id, event.type])).toEqual([['p_ended', 'pipeline.cancelled'], ['p_open', 'pipeline.succeeded']]);
  });

  it('delivers nothing for a pipeline forgotten (its commit failed), nor after it is closed', async () => {
    const { store, commits, delivered, ends, job, finish, pipeline } = setup();
    const watcher = ends();
    const [a, b] = [job(), job()];
    commits.write(() => { watcher.arm(pipeline('p_forgotten', [a]), URL); watcher.arm(pipeline('p_closed', [b]), URL); });
    watcher.jobEnded(finish(a, 'cancelled', 'CANCELLED'));
    watcher.forget('p_forgotten');
    watcher.close();
    watcher.jobEnded(finish(b, 'succeeded'));
    await settle();
    expect(delivered).toEqual([]);
    // Still armed in the store: the next start delivers what the closed one did not.
    expect((await store.webhooks.armedPipelines()).map((armed) => armed.pipelineId)).toContain('p_closed');
  });
});
