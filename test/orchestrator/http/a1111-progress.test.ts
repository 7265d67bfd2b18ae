import { describe, expect, it } from 'vitest';
import type { JobEvent } from '../../../src/protocol/api/index.js';
import type { JobStatus } from '../../../src/protocol/index.js';
import { EventBus } from '../../../src/orchestrator/events/event-bus.js';
import { A1111Lineages } from '../../../src/orchestrator/http/a1111/lineages.js';
import { progressOf } from '../../../src/orchestrator/http/a1111/progress.js';
import type { JobRecord } from '../../../src/orchestrator/store/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';

/** `/sdapi/v1/progress` from a generation's job events, and the per-lineage state the door keeps. */
const at = new Date(0).toISOString();
const scope = { type: 'image', model: 'gen', album: 'default' };

function setup() {
  const clock = new FakeClock(Date.UTC(2026, 0, 2, 3, 4, 5));
  const events = new EventBus(clock);
  const records = (ids: string[]) => ids.map((id) => ({ id, status: 'queued' as JobStatus }) as JobRecord);
  const send = (event: JobEvent, record?: JobRecord) => {
    if (record && ['succeeded', 'failed', 'cancelled', 'expired'].includes(event.type)) record.status = event.type as JobStatus;
    events.publish(event, scope);
  };
  return { clock, events, records, send };
}

describe('progressOf', () => {
  it('is A1111\'s idle answer without work (what SillyTavern waits for after a switch)', () => {
    expect(progressOf([], 0, false)).toEqual({
      progress: 0, eta_relative: 0, current_image: null, textinfo: null,
      state: { skipped: false, interrupted: false, stopping_generation: false, job: '', job_count: 0, job_timestamp: '0', job_no: 0, sampling_step: 0, sampling_steps: 0 },
    });
  });

  it('moves with the jobs\' steps, counts pictures made, shows the newest preview, and forgets the work once every job ended', () => {
    const { clock, events, records, send } = setup();
    const lineages = new A1111Lineages();
    const [first, second] = records(['j_a', 'j_b']);
    const generation = lineages.start('lineage', 'txt2img', [first!, second!], events);
    expect(progressOf(lineages.generations('lineage'), clock.now(), false)).toMatchObject({ progress: 0, state: { job_count: 2, job_no: 0, job: 'scripts_txt2img', job_timestamp: '20260102030405' } });

    send({ type: 'running', jobId: 'j_a', host: 'h', at });
    send({ type: 'progress', jobId: 'j_a', step: 5, total: 20, pct: 25, at });
    send({ type: 'progress', jobId: 'j_b', step: 5, total: 20, pct: 25, at });
    send({ type: 'preview', jobId: 'j_b', step: 5, total: 20, mediaType: 'image/png', b64: 'cHJldmlldw==', at });
    clock.advance(2000);
    const moving = progressOf(lineages.generations('lineage'), clock.now(), false);
    expect(moving).toMatchObject({ progress: 0.25, state: { sampling_step: 5, sampling_steps: 20, job_no: 0 }, current_image: 'cHJldmlldw==', textinfo: '0 of 2 pictures made; the next at step 5 of 20' });
    // Two seconds for a quarter: six more.
    expect(moving.eta_relative).toBeCloseTo(6);
    expect(progressOf(lineages.generations('lineage'), clock.now(), true).current_image).toBeNull();

    send({ type: 'succeeded', jobId: 'j_a', artifacts: [], result: null, at }, first);
    expect(progressOf(lineages.generations('lineage'), clock.now(), false)).toMatchObject({ progress: 0.625, state: { job_no: 1, sampling_step: 5 } });
    expect(generation.unfinished()).toEqual(['j_b']);
    send({ type: 'cancelled', jobId: 'j_b', at }, second);
    expect(generation.over).toBe(true);
    expect(lineages.generations('lineage')).toEqual([]);
    expect(progressOf(lineages.generations('lineage'), clock.now(), false).state.job_count).toBe(0);
  });

  it('tells the jobs on a host (what /skip cancels) from those still queued', () => {
    const { events, records, send } = setup();
    const generation = new A1111Lineages().start('lineage', 'img2img', records(['j_1', 'j_2', 'j_3']), events);
    send({ type: 'dispatched', jobId: 'j_2', host: 'h', replica: 'r', batchId: 'b', batchSize: 1, attempt: 1, at });
    expect(generation.unfinished(true)).toEqual(['j_2']);
    expect(generation.unfinished()).toEqual(['j_1', 'j_2', 'j_3']);
  });
});

describe('A1111Lineages', () => {
  it('keeps each lineage\'s chosen checkpoint apart, and forgets the least recently seen past its bound — never one with work in flight', () => {
    const { events, records } = setup();
    const lineages = new A1111Lineages(2);
    lineages.choose('busy', 'sd15 [aaaaaaaaaa]');
    lineages.start('busy', 'txt2img', records(['j_busy']), events);
    lineages.choose('a', 'gen [bbbbbbbbbb]');
    expect(lineages.checkpoint('busy')).toBe('sd15 [aaaaaaaaaa]');
    expect(lineages.checkpoint('a')).toBe('gen [bbbbbbbbbb]');
    lineages.choose('b', 'gen [cccccccccc]');
    // 'busy' was seen first but has a job being made: 'a' goes.
    expect(lineages.size).toBe(2);
    expect(lineages.checkpoint('a')).toBeNull();
    expect(lineages.checkpoint('busy')).toBe('sd15 [aaaaaaaaaa]');
    expect(lineages.checkpoint('b')).toBe('gen [cccccccccc]');
  });

  it('shows a narrowing of the lineage\'s grant only the work whose every job it may see', () => {
    const { events } = setup();
    const lineages = new A1111Lineages();
    const job = (id: string, album: string) => ({ id, status: 'queued', type: 'image', model: 'gen', album }) as JobRecord;
    const mine = lineages.start('lineage', 'txt2img', [job('j_1', 'other')], events);
    const theirs = lineages.start('lineage', 'txt2img', [job('j_2', 'default'), job('j_3', 'other')], events);
    expect(lineages.generations('lineage')).toEqual([mine, theirs]);
    expect(lineages.generations('lineage', (record) => record.album === 'other')).toEqual([mine]);
  });
});
