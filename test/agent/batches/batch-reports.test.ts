import { beforeEach, describe, expect, it } from 'vitest';
import { BatchReports } from '../../../src/agent/batches/batch-reports.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const started = { type: 'started' as const, batchId: 'b', jobIds: ['j'] };
const progress = (step: number) => ({ type: 'progress' as const, batchId: 'b', jobIds: ['j'], step, total: 3 });

describe('BatchReports', () => {
  let clock: FakeClock;
  beforeEach(() => {
    clock = new FakeClock();
  });

  it('drops the reports of a batch that ends within the delay', () => {
    const sent: unknown[] = [];
    const reports = new BatchReports((report) => sent.push(report), 10, clock);
    reports.report(started);
    reports.report(progress(1));
    clock.advance(9);
    reports.end();
    clock.advance(100);
    expect(sent).toEqual([]);
  });

  it('sends the held reports in order once the batch outlives the delay, and every later one at once', () => {
    const sent: unknown[] = [];
    const reports = new BatchReports((report) => sent.push(report), 10, clock);
    reports.report(started);
    reports.report(progress(1));
    expect(sent).toEqual([]);
    clock.advance(10);
    expect(sent).toEqual([started, progress(1)]);
    reports.report(progress(2));
    reports.report(progress(3));
    expect(sent).toEqual([started, progress(1), progress(2), progress(3)]);
    reports.end();
    reports.report(progress(3));
    expect(sent).toHaveLength(4);
  });

  it('sends at once with no delay', () => {
    const sent: unknown[] = [];
    const reports = new BatchReports((report) => sent.push(report), 0, clock);
    reports.report(started);
    expect(sent).toEqual([started]);
  });
});
