import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { BatchMemoryReport, ModelManifest } from '../../../src/protocol/index.js';
import { MemoryEstimator, MemoryPlanner, type MemoryHost } from '../../../src/orchestrator/scheduler/memory.js';

const gen: ModelManifest = {
  name: 'gen', version: '1', engine: 'onnx', digest: 'sha256:x', bytes: 1, memoryMB: 128, jobTypes: ['image'], params: {},
};
const square = (side: number) => ({ prompt: 'p', width: side, height: side, steps: 4 });

/** A synthetic model: 40 MB to load, 2 MB per batch, 0.001 MB per pixel. */
const truth = (pixels: number, batchSize: number): number => 40 + 2 + 0.001 * pixels * batchSize;
const report = (side: number, batchSize: number, extra: Partial<BatchMemoryReport> = {}): BatchMemoryReport =>
  ({ residentMB: 40, peakMB: truth(side * side, batchSize), pixels: side * side, batchSize, ...extra });

describe('memory estimator', () => {
  it('before anything is measured, the manifest\'s figure is the estimate', () => {
    const memory = new MemoryEstimator();
    expect(memory.estimate(gen, square(1024), 4)).toBe(128);
    expect(memory.largestBatchThatFits(gen, square(1024), 200)).toBe(Infinity);
    expect(memory.largestBatchThatFits(gen, square(64), 100)).toBe(0);
    // A report that carries no peak teaches the resident figure only.
    memory.observe('gen', { residentMB: 40, pixels: 4096, batchSize: 1 });
    expect(memory.model('gen')).toBeNull();
    expect(memory.estimate(gen, square(64), 1)).toBe(128);
  });

  it('learns resident + overhead + MB per pixel from batches of a few sizes and extrapolates', () => {
    const memory = new MemoryEstimator();
    for (const [side, batch] of [[64, 1], [128, 4], [256, 1], [256, 4]] as const) memory.observe('gen', report(side, batch));
    const model = memory.model('gen')!;
    expect(model.residentMB).toBe(40);
    expect(model.mbPerPixel).toBeCloseTo(0.001, 6);
    expect(model.overheadMB).toBeCloseTo(2, 3);
    expect(model.batches).toBe(4);
    // 1024x1024, alone: 40 + 2 + 1048.6
    expect(memory.estimate(gen, square(1024), 1)).toBe(Math.ceil(truth(1024 * 1024, 1)));
    expect(memory.estimate(gen, square(512), 4)).toBe(Math.ceil(truth(512 * 512, 4)));
  });

  it('one size seen: memory is taken as proportional to size (an overestimate for larger batches)', () => {
    const memory = new MemoryEstimator();
    memory.observe('gen', report(128, 1));
    const model = memory.model('gen')!;
    expect(model.overheadMB).toBe(0);
    expect(model.mbPerPixel).toBeCloseTo((2 + 0.001 * 16384) / 16384, 9);
    expect(memory.estimate(gen, square(256), 1)).toBeGreaterThanOrEqual(truth(256 * 256, 1));
  });

  it('tiny batches, whose working memory is within the noise, do not make it extrapolate wildly', () => {
    const memory = new MemoryEstimator();
    // An 8x8 image measured 2 MB over the model: read as MB per pixel that would be 30 GB for 1024x1024.
    memory.observe('gen', { residentMB: 40, peakMB: 42, pixels: 64, batchSize: 1 });
    memory.observe('gen', { residentMB: 40, peakMB: 45, pixels: 256, batchSize: 1 });
    expect(memory.model('gen')!.mbPerPixel).toBe(0);
    expect(memory.estimate(gen, square(1024), 1)).toBe(128); // the declared figure stays the floor until growth is seen
    expect(memory.largestBatchThatFits(gen, square(1024), 500)).toBe(Infinity);
    // Once a batch shows real growth, that is what scales.
    memory.observe('gen', report(256, 1));
    expect(memory.model('gen')!.mbPerPixel).toBeCloseTo((2 + 65.536) / 65536, 9);
    expect(memory.estimate(gen, square(1024), 1)).toBeLessThan(1200);
    expect(memory.estimate(gen, square(8), 1)).toBeGreaterThanOrEqual(45); // and it still covers what the tiny ones took
  });

  it('keeps the largest figures: a smaller peak at a size already seen lowers nothing', () => {
    const memory = new MemoryEstimator();
    memory.observe('gen', report(256, 1));
    memory.observe('gen', report(512, 1));
    const before = memory.estimate(gen, square(1024), 1);
    memory.observe('gen', report(512, 1, { peakMB: 45, residentMB: 30 }));
    expect(memory.estimate(gen, square(1024), 1)).toBe(before);
    memory.observe('gen', { residentMB: 90, pixels: 64, batchSize: 1 });
    expect(memory.model('gen')!.residentMB).toBe(90);
  });

  it('never estimates below a peak it has seen (property, random noisy observations)', () => {
    const observation = fc.record({
      side: fc.integer({ min: 8, max: 1024 }),
      batchSize: fc.integer({ min: 1, max: 8 }),
      residentMB: fc.integer({ min: 1, max: 200 }),
      workingMB: fc.double({ min: 0, max: 5000, noNaN: true }),
    });
    fc.assert(fc.property(fc.array(observation, { minLength: 1, maxLength: 30 }), (observations) => {
      const memory = new MemoryEstimator();
      for (const o of observations) {
        memory.observe('gen', { residentMB: o.residentMB, peakMB: o.residentMB + o.workingMB, pixels: o.side * o.side, batchSize: o.batchSize });
      }
      for (const o of observations) {
        expect(memory.estimate(gen, square(o.side), o.batchSize)).toBeGreaterThanOrEqual(o.residentMB + o.workingMB - 1e-6);
      }
    }));
  });

  it('a staircase (an arena growing in doubling steps) does not make it promise a larger batch too little', () => {
    // Figures the ONNX worker measured for gen in one process (64x64, 128x128, 256x256 alone, then 6 at 256x256);
    // the next batch, 9 at 256x256, then measured a peak of 429 MB.
    const memory = new MemoryEstimator();
    for (const [side, batchSize, peakMB] of [[64, 1, 30], [128, 1, 44], [256, 1, 85], [256, 6, 252]] as const) {
      memory.observe('gen', { residentMB: 22, peakMB, pixels: side * side, batchSize });
    }
    expect(memory.estimate(gen, square(256), 9)).toBeGreaterThanOrEqual(429);
    expect(memory.largestBatchThatFits(gen, square(256), 400)).toBeLessThan(9);
  });

  it('largestBatchThatFits is the largest batch whose estimate fits the budget', () => {
    const memory = new MemoryEstimator();
    for (const [side, batch] of [[64, 1], [256, 1], [256, 4]] as const) memory.observe('gen', report(side, batch));
    for (const budget of [30, 42, 100, 300, 1100, 5000]) {
      const fits = memory.largestBatchThatFits(gen, square(256), budget);
      if (fits > 0) expect(memory.estimate(gen, square(256), fits)).toBeLessThanOrEqual(budget);
      expect(memory.estimate(gen, square(256), fits + 1)).toBeGreaterThan(budget);
    }
    expect(memory.largestBatchThatFits(gen, square(256), 300)).toBe(3);
    expect(memory.largestBatchThatFits(gen, square(1024), 500)).toBe(0);
  });
});

describe('memory planner', () => {
  const hosts: MemoryHost[] = [{ id: 'laptop', largestBudgetMB: 500 }, { id: 'tower', largestBudgetMB: 900 }];
  const planner = (connected = hosts) => {
    const estimator = new MemoryEstimator();
    return { estimator, planner: new MemoryPlanner(estimator, () => connected) };
  };

  it('refuses, with the figures, a job too large for the largest budget among hosts that could run it', () => {
    const { estimator, planner: memory } = planner();
    const model = { manifest: gen };
    memory.admit(model, square(1024), ['image']); // nothing measured: never refused on the guess alone
    for (const [side, batch] of [[64, 1], [256, 1], [256, 4]] as const) estimator.observe('gen', report(side, batch));
    memory.admit(model, square(512), ['image']);
    expect(() => memory.admit(model, square(1024), ['image'])).toThrow(expect.objectContaining({
      code: 'JOB_TOO_LARGE', status: 422,
      message: expect.stringMatching(/needs an estimated 1091 MB on model "gen" \(1024x1024 = 1048576 pixels; 40 MB to load \+ 2 MB \+ 0\.00100 MB per pixel, learned from 3 measured batches\).*900 MB on tower/),
    }));
    // No host that could run it is connected: nothing to judge by, the job waits like any other.
    planner([]).planner.admit(model, square(1024), ['image']);
  });

  it('caps a batch so its estimated peak fits the host it goes to, and never below one job', () => {
    const { estimator, planner: memory } = planner();
    for (const [side, batch] of [[64, 1], [256, 1], [256, 4]] as const) estimator.observe('gen', report(side, batch));
    expect(memory.batchCap({ manifest: gen }, square(512), hosts[0]!)).toBe(1); // 40 + 2 + 262 each: one fits 500 MB
    expect(memory.batchCap({ manifest: gen }, square(256), hosts[1]!)).toBe(13);
    expect(memory.batchCap({ manifest: gen }, square(1024), hosts[0]!)).toBe(1);
  });
});
