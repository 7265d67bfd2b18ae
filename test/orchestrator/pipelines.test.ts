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
});
