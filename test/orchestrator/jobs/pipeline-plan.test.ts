import { describe, expect, it } from 'vitest';
import { LIMITS, MeshError, SubmitPipelineBody } from '../../../src/protocol/index.js';
import { planPipeline } from '../../../src/orchestrator/jobs/pipeline-plan.js';
import { referencesIn, pickOutput, hasReference } from '../../../src/orchestrator/jobs/references.js';

let n = 0;
const ids = (): string => `j_test${++n}`;
const step = (id: string, input: Record<string, unknown> = { prompt: id }, type = 'image') => ({ id, type, input });
const body = (...steps: ReturnType<typeof step>[]) => SubmitPipelineBody.parse({ steps });

function refused(run: () => unknown): MeshError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(MeshError);
    return error as MeshError;
  }
  throw new Error('expected a refusal');
}

describe('planPipeline: a pipeline checked whole before anything is admitted', () => {
  it('orders steps after the steps they take outputs from, and turns step references into job references', () => {
    const plan = planPipeline(body(
      step('clip', { prompt: 'clip', image: { fromStep: 'picture', output: 0 } }, 'video'),
      step('picture'),
    ), ids);
    expect(plan.steps.map((entry) => entry.id)).toEqual(['picture', 'clip']);
    expect(plan.depth).toBe(2);
    const picture = plan.steps[0]!;
    expect(plan.steps[1]!.body.input.image).toEqual({ fromJob: picture.jobId, output: 0 });
    expect(plan.steps[1]!.after).toEqual(['picture']);
    expect(plan.steps[1]!.index).toBe(0);
  });

  it('keeps an artifact type a reference names', () => {
    const plan = planPipeline(body(step('a'), step('b', { prompt: 'b', image: { fromStep: 'a', output: 1, artifact: 'image/png' } })), ids);
    expect(plan.steps[1]!.body.input.image).toMatchObject({ output: 1, artifact: 'image/png' });
  });

  it('refuses a cycle, naming the steps in it', () => {
    const error = refused(() => planPipeline(body(
      step('a', { prompt: 'a', image: { fromStep: 'c' } }),
      step('b', { prompt: 'b', image: { fromStep: 'a' } }),
      step('c', { prompt: 'c', image: { fromStep: 'b' } }),
    ), ids));
    expect(error.code).toBe('PIPELINE_INVALID');
    expect(error.status).toBe(400);
    expect(error.message).toMatch(/cycle: a → c → b → a|cycle: .* → .*/);
    expect(error.message).toContain('steps.');
  });

  it('refuses a step that takes its own output', () => {
    const error = refused(() => planPipeline(body(step('a', { prompt: 'a', image: { fromStep: 'a' } })), ids));
    expect(error.message).toContain('steps.0.input.image.fromStep');
  });

  it('refuses a reference to a step that does not exist, naming the field', () => {
    const error = refused(() => planPipeline(body(step('a'), step('b', { prompt: 'b', mask: { fromStep: 'nope' } })), ids));
    expect(error.code).toBe('PIPELINE_INVALID');
    expect(error.message).toContain('steps.1.input.mask.fromStep');
    expect(error.message).toContain('"nope"');
  });

  it('refuses a malformed step reference, naming the field', () => {
    const error = refused(() => planPipeline(body(step('a'), step('b', { prompt: 'b', image: { fromStep: 'a', output: -1 } })), ids));
    expect(error.message).toContain('steps.1.input.image');
  });

  it('refuses two steps of one name', () => {
    const error = refused(() => planPipeline(body(step('a'), step('a')), ids));
    expect(error.message).toContain('steps.1.id');
  });

  it('bounds the longest chain', () => {
    const chain = Array.from({ length: LIMITS.pipeline.depth + 1 }, (_, index) => step(`s${index}`, index === 0 ? { prompt: 'first' } : { prompt: 'next', image: { fromStep: `s${index - 1}` } }));
    const error = refused(() => planPipeline(body(...chain), ids));
    expect(error.code).toBe('PIPELINE_INVALID');
    expect(error.message).toContain(`at most ${LIMITS.pipeline.depth} long`);
    expect(planPipeline(body(...chain.slice(0, LIMITS.pipeline.depth)), ids).depth).toBe(LIMITS.pipeline.depth);
  });

  it('bounds the steps (the schema, before the plan)', () => {
    const many = Array.from({ length: LIMITS.pipeline.steps + 1 }, (_, index) => step(`s${index}`));
    expect(SubmitPipelineBody.safeParse({ steps: many }).success).toBe(false);
    expect(SubmitPipelineBody.safeParse({ steps: [] }).success).toBe(false);
  });
});

describe('job references', () => {
  it('reads the documented shape, the output defaulting to 0', () => {
    expect(referencesIn({ prompt: 'x', image: { fromJob: 'j_abc', output: 0 } })).toEqual([{ field: 'image', fromJob: 'j_abc', output: 0 }]);
    expect(referencesIn({ image: { fromJob: 'j_abc' } })[0]!.output).toBe(0);
    expect(hasReference({ image: 'sha256:00' })).toBe(false);
    expect(hasReference({ image: { fromJob: 'j_abc' } })).toBe(true);
  });

  it('refuses anything else in a picture field with BAD_REFERENCE naming the field', () => {
    for (const value of [{ fromJob: 'x_1' }, { fromJob: 'j_1', output: 'first' }, { fromJob: 'j_1', extra: true }, {}]) {
      const error = refused(() => referencesIn({ image: value }));
      expect(error.code).toBe('BAD_REFERENCE');
      expect(error.status).toBe(400);
      expect(error.message).toContain('input.image');
    }
  });

  it('picks an output by index, among a media type when named, and only a picture', () => {
    const outputs = [{ digest: 'sha256:mp4', mediaType: 'video/mp4' }, { digest: 'sha256:png', mediaType: 'image/png' }];
    expect(pickOutput(outputs, { field: 'image', fromJob: 'j_1', output: 1 })).toEqual({ digest: 'sha256:png' });
    expect(pickOutput(outputs, { field: 'image', fromJob: 'j_1', output: 0, artifact: 'image/png' })).toEqual({ digest: 'sha256:png' });
    expect(pickOutput(outputs, { field: 'image', fromJob: 'j_1', output: 0 })).toMatchObject({ refusal: expect.stringContaining('video/mp4, not a picture') });
    expect(pickOutput(outputs, { field: 'image', fromJob: 'j_1', output: 2 })).toMatchObject({ refusal: expect.stringContaining('no output 2') });
  });
});
