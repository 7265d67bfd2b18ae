import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JOB_INPUTS } from '../../../src/orchestrator/job-inputs/job-inputs.js';
import { LIMITS, TensorInput, type ModelManifest } from '../../../src/protocol/index.js';

const manifest: ModelManifest = {
  name: 'sd', version: '1', engine: 'sdcpp', digest: `sha256:${'0'.repeat(64)}`, bytes: 0, memoryMB: 1,
  jobTypes: ['image'], params: { defaultSteps: 20 },
};

describe('the image job type\'s input handling', () => {
  it('keeps a negative prompt for the engines that use one, and adds none when there is none', () => {
    expect(JOB_INPUTS.image.normalize({ prompt: 'a cat', seed: 1, negativePrompt: 'blurry' }, manifest))
      .toEqual({ prompt: 'a cat', seed: 1, width: 256, height: 256, steps: 20, negativePrompt: 'blurry' });
    expect(JOB_INPUTS.image.normalize({ prompt: 'a cat', seed: 1 }, manifest)).not.toHaveProperty('negativePrompt');
  });

  it('refuses a negative prompt that is not a string', () => {
    expect(() => JOB_INPUTS.image.normalize({ prompt: 'a cat', negativePrompt: 3 }, manifest)).toThrow(/negativePrompt/);
  });

  it('a probe input is a valid input (the smallest picture, or the manifest\'s probe size), and cost is pixel-steps', () => {
    const image = JOB_INPUTS.image;
    const probe = image.probeInput(manifest);
    expect(image.normalize(probe, manifest)).toEqual({ ...probe, width: 8, height: 8, steps: 1 });
    expect(image.probeInput({ ...manifest, params: { probeWidth: 64, probeHeight: 64, probeSteps: 2 } })).toMatchObject({ width: 64, height: 64, steps: 2 });
    expect(image.cost(image.normalize({ prompt: 'x', width: 64, height: 32, steps: 4 }, manifest))).toBe(64 * 32 * 4);
    const tensorManifest: ModelManifest = { ...manifest, jobTypes: ['tensor'], params: { inputDim: 4 } };
    expect(JOB_INPUTS.tensor.normalize(JOB_INPUTS.tensor.probeInput(tensorManifest), tensorManifest)).toEqual({ x: [0, 0, 0, 0] });
    expect(JOB_INPUTS.tensor.cost({ x: [1, 2, 3, 4] })).toBe(1);
  });

  it('a tensor model that declares no inputDim (a server that knows its own width) is probed with one zero', () => {
    // `new Array(NaN)` threw a RangeError in the prober's timer, which ended the orchestrator process.
    const undeclared: ModelManifest = { ...manifest, engine: 'oip', jobTypes: ['tensor'], params: {} };
    expect(JOB_INPUTS.tensor.normalize(JOB_INPUTS.tensor.probeInput(undeclared), undeclared)).toEqual({ x: [0] });
  });

  it('accepts exactly what the tensor schema accepts (its one-pass check), and words a refusal as the schema does', () => {
    const undeclared: ModelManifest = { ...manifest, engine: 'oip', jobTypes: ['tensor'], params: {} };
    const value = fc.oneof(fc.double(), fc.integer(), fc.constantFrom(NaN, Infinity, -Infinity, -0, null, '1', true, undefined), fc.array(fc.double(), { maxLength: 2 }));
    const input = fc.oneof(
      fc.record({ x: fc.array(fc.double({ noNaN: true, noDefaultInfinity: true }), { maxLength: 8 }) }),
      fc.record({ x: fc.array(value, { maxLength: 8 }) }),
      fc.record({ x: fc.array(fc.double({ noNaN: true, noDefaultInfinity: true }), { minLength: 1, maxLength: 4 }), y: value }),
      fc.record({ x: fc.oneof(value, fc.object()) }),
      fc.constant({ x: new Array<number>(LIMITS.tensorValues + 1).fill(1) }),
      fc.constant({ x: new Array<number>(LIMITS.tensorValues).fill(1) }),
    );
    fc.assert(fc.property(input, (candidate: Record<string, unknown>) => {
      const schema = TensorInput.safeParse(candidate);
      let outcome: unknown;
      try {
        outcome = JOB_INPUTS.tensor.normalize(candidate, undeclared);
      } catch (error) {
        outcome = error;
      }
      if (schema.success) expect(outcome).toEqual({ x: schema.data.x });
      else expect((outcome as Error).message).toContain(schema.error.issues[0]!.message);
    }), { numRuns: 400 });
  });
});

describe('the video job type\'s input handling', () => {
  const clips: ModelManifest = { ...manifest, name: 'gen-video', engine: 'onnx', jobTypes: ['video'], params: { defaultSteps: 6 } };

  it('fills every default, so the stored job makes the same clip again', () => {
    expect(JOB_INPUTS.video.normalize({ prompt: 'waves', seed: 3 }, clips)).toEqual({ prompt: 'waves', seed: 3, frames: 48, fps: 24, width: 256, height: 256, steps: 6 });
    expect(JOB_INPUTS.video.normalize({ prompt: 'waves' }, clips).seed).toEqual(expect.any(Number));
  });

  it('names the field that is wrong', () => {
    const refused = (input: Record<string, unknown>) => {
      try {
        JOB_INPUTS.video.normalize(input, clips);
      } catch (error) {
        return (error as Error).message;
      }
      return 'accepted';
    };
    expect(refused({ prompt: 'x', frames: 1 })).toMatch(/frames: Too small/);
    expect(refused({ prompt: 'x', fps: 0.5 })).toMatch(/fps: /);
    expect(refused({ prompt: 'x', width: 99 })).toMatch(/width: must be even/);
    expect(refused({ prompt: 'x', width: 1024, height: 512 })).toMatch(/width × height: 1024×512 is 524288 pixels a frame; the limit is 262144/);
    expect(refused({ prompt: 'x', width: 512, height: 512, frames: 200 })).toMatch(/frames: 200 frames of 512×512 are 52428800 pixels; the limit for a clip is 50000000/);
    expect(refused({ prompt: 'x', style: 'noir' })).toMatch(/Unrecognized key: "style"/);
  });

  it('a clip costs its frames\' pixel-steps, shares a batch only with clips of its shape, and its probe is a valid clip', () => {
    const a = JOB_INPUTS.video.normalize({ prompt: 'a', frames: 10, width: 64, height: 32, steps: 2 }, clips);
    const b = JOB_INPUTS.video.normalize({ prompt: 'b', frames: 10, width: 64, height: 32, steps: 2, fps: 5 }, clips);
    expect(JOB_INPUTS.video.cost(a)).toBe(64 * 32 * 2 * 10);
    expect(JOB_INPUTS.video.compatKey(a)).toBe(JOB_INPUTS.video.compatKey(b));
    expect(JOB_INPUTS.video.compatKey(a)).not.toBe(JOB_INPUTS.video.compatKey({ ...a, frames: 11 }));
    const probe = JOB_INPUTS.video.probeInput(clips);
    expect(JOB_INPUTS.video.normalize(probe, clips)).toEqual(probe);
  });
});

describe('the workflow job type\'s input handling', () => {
  const comfy: ModelManifest = { ...manifest, name: 'comfy', engine: 'comfyui', jobTypes: ['workflow'], params: {} };
  const save = { class_type: 'SaveImage', inputs: { images: ['1', 0] } };
  const digest = `sha256:${'1'.repeat(64)}`;

  it('takes the workflow as sent, nothing filled in; refuses links to nodes it lacks, pictures no node names, large extra data', () => {
    const input = { workflow: { 1: { class_type: 'LoadImage', inputs: { image: 'photo.png' } }, 2: save }, pictures: { 'photo.png': digest }, promptId: 'p', clientId: 'c' };
    expect(JOB_INPUTS.workflow.normalize(input, comfy)).toEqual(input);
    expect(() => JOB_INPUTS.workflow.normalize({ workflow: { 2: save } }, comfy)).toThrow(/workflow\.2\.inputs\.images: links to node "1", which the workflow does not have/);
    expect(() => JOB_INPUTS.workflow.normalize({ ...input, pictures: { 'other.png': digest } }, comfy)).toThrow(/pictures\.other\.png: no node input of the workflow names "other\.png"/);
    expect(() => JOB_INPUTS.workflow.normalize({ ...input, extraData: { big: 'x'.repeat(20_000) } }, comfy)).toThrow(/extraData: more than 16384 characters/);
    expect(() => JOB_INPUTS.workflow.normalize({ workflow: {} }, comfy)).toThrow(/one node at least/);
  });

  it('jobs share a batch only with the same graph; cost is the samplers\' steps at the largest size named', () => {
    const one = { workflow: { 3: { class_type: 'KSampler', inputs: { steps: 20 } }, 5: { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 32 } } } };
    const other = { workflow: { 3: { class_type: 'KSampler', inputs: { steps: 21 } } } };
    expect(JOB_INPUTS.workflow.compatKey(one)).toBe(JOB_INPUTS.workflow.compatKey(structuredClone(one)));
    expect(JOB_INPUTS.workflow.compatKey(one)).not.toBe(JOB_INPUTS.workflow.compatKey(other));
    expect(JOB_INPUTS.workflow.cost(one)).toBe(20 * 64 * 32);
    expect(JOB_INPUTS.workflow.cost(other)).toBe(21 * 512 * 512);
    // The probe is an empty graph: the agent asks its ComfyUI whether it is up.
    expect(JOB_INPUTS.workflow.probeInput(comfy)).toEqual({ workflow: {} });
  });
});
