import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { succeededJson } from '../../../src/orchestrator/jobs/states.js';

describe('succeededJson', () => {
  it('writes the bytes JSON.stringify writes for a succeeded event, around the result\'s JSON made once for the row', () => {
    const artifact = fc.record({
      digest: fc.string(), mediaType: fc.constantFrom('image/png', 'video/mp4'), bytes: fc.nat(), width: fc.option(fc.nat()), height: fc.option(fc.nat()),
      url: fc.string(), prompt: fc.option(fc.string({ unit: 'grapheme' })),
    });
    fc.assert(fc.property(fc.string({ unit: 'grapheme' }), fc.jsonValue(), fc.date({ noInvalidDate: true }), fc.array(artifact, { maxLength: 3 }), (jobId, result, when, artifacts) => {
      const event = { type: 'succeeded' as const, jobId, result, at: when.toISOString(), artifacts: artifacts as never[] };
      expect(succeededJson(event, JSON.stringify(result))).toBe(JSON.stringify(event));
    }), { numRuns: 1000 });
    // A tensor's result as the engines give it, and none at all.
    const tensor = { y: [0.1, -2.5e-8, 3], shape: [3] };
    const event = { type: 'succeeded' as const, jobId: 'j_1', result: tensor, at: '2026-12-06T19:00:00.000Z', artifacts: [] };
    expect(JSON.parse(succeededJson(event, JSON.stringify(tensor)))).toEqual(event);
    expect(succeededJson({ ...event, result: null }, 'null')).toBe(JSON.stringify({ ...event, result: null }));
  });
});
