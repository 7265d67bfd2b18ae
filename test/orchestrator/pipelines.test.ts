import { describe, expect, it } from 'vitest';
import { PIPELINES } from '../../src/orchestrator/registry/pipelines.js';
import type { ModelManifest } from '../../src/protocol/index.js';

const manifest: ModelManifest = {
  name: 'sd', version: '1', engine: 'sdcpp', digest: `sha256:${'0'.repeat(64)}`, bytes: 0, memoryMB: 1,
  jobTypes: ['image'], params: { defaultSteps: 20 },
};

describe('the image pipeline', () => {
  it('keeps a negative prompt for the engines that use one, and adds none when there is none', () => {
    expect(PIPELINES.image.normalize({ prompt: 'a cat', seed: 1, negativePrompt: 'blurry' }, manifest))
      .toEqual({ prompt: 'a cat', seed: 1, width: 256, height: 256, steps: 20, negativePrompt: 'blurry' });
    expect(PIPELINES.image.normalize({ prompt: 'a cat', seed: 1 }, manifest)).not.toHaveProperty('negativePrompt');
  });

  it('refuses a negative prompt that is not a string', () => {
    expect(() => PIPELINES.image.normalize({ prompt: 'a cat', negativePrompt: 3 }, manifest)).toThrow(/negativePrompt/);
  });

  it('a probe input is a valid input (the smallest picture, or the manifest\'s probe size), and cost is pixel-steps', () => {
    const image = PIPELINES.image;
    const probe = image.probeInput(manifest);
    expect(image.normalize(probe, manifest)).toEqual({ ...probe, width: 8, height: 8, steps: 1 });
    expect(image.probeInput({ ...manifest, params: { probeWidth: 64, probeHeight: 64, probeSteps: 2 } })).toMatchObject({ width: 64, height: 64, steps: 2 });
    expect(image.cost(image.normalize({ prompt: 'x', width: 64, height: 32, steps: 4 }, manifest))).toBe(64 * 32 * 4);
    const tensorManifest: ModelManifest = { ...manifest, jobTypes: ['tensor'], params: { inputDim: 4 } };
    expect(PIPELINES.tensor.normalize(PIPELINES.tensor.probeInput(tensorManifest), tensorManifest)).toEqual({ x: [0, 0, 0, 0] });
    expect(PIPELINES.tensor.cost({ x: [1, 2, 3, 4] })).toBe(1);
  });
});
