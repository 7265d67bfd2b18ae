import { describe, expect, it } from 'vitest';
import { BodyInvalid, a1111ErrorBody } from '../../../src/orchestrator/http/a1111/errors.js';
import { readGeneration } from '../../../src/orchestrator/http/a1111/requests.js';
import { infoOf } from '../../../src/orchestrator/http/a1111/answers.js';
import { findCheckpoint, type Checkpoint } from '../../../src/orchestrator/http/a1111/checkpoints.js';
import { LIMITS, MeshError } from '../../../src/protocol/index.js';

/** A1111's bodies read as its pydantic models read them, mapped onto the mesh's image jobs. */
const issuesOf = (kind: 'txt2img' | 'img2img', body: unknown) => {
  try {
    readGeneration(kind, body);
  } catch (error) {
    expect(error).toBeInstanceOf(BodyInvalid);
    return (error as BodyInvalid).issues;
  }
  throw new Error('the body was accepted');
};

describe('readGeneration', () => {
  it('takes what the mesh uses, coerces as pydantic v1 does, ignores keys it does not know', () => {
    const read = readGeneration('txt2img', {
      prompt: '  a fox  ', negative_prompt: 'blur', seed: '42', width: 96.0, height: '64', steps: 20, batch_size: 2, n_iter: '3', cfg_scale: '6.5',
      sampler_name: 'Euler a', send_images: 'false', url: 'http://127.0.0.1:7860', auth: 'user:secret',
    });
    expect(read).toMatchObject({
      prompt: 'a fox', negativePrompt: 'blur', seed: 42, size: { width: 96, height: 64 }, steps: 20, batchSize: 2, nIter: 3, cfgScale: 6.5,
      samplerName: 'Euler a', sendImages: false, checkpoint: undefined, keepCheckpoint: false, notes: {},
    });
    // Every field of A1111's model, defaults filled; none of the client's own.
    expect(read.parameters).toMatchObject({ prompt: '  a fox  ', seed: 42, steps: 20, sampler_index: 'Euler', override_settings_restore_afterwards: true, enable_hr: false });
    expect(read.parameters).not.toHaveProperty('auth');
    expect(read.parameters).not.toHaveProperty('url');
  });

  it('leaves to the model what the body leaves out: size, steps; −1 is a random seed; the sampler defaults to sampler_index', () => {
    expect(readGeneration('txt2img', { prompt: 'x' })).toMatchObject({ seed: null, size: null, steps: undefined, samplerName: 'Euler', batchSize: 1, nIter: 1 });
    expect(readGeneration('txt2img', { prompt: 'x', seed: -1, sampler_name: null, sampler_index: 'DDIM' })).toMatchObject({ seed: null, samplerName: 'DDIM' });
  });

  it('runs steps above the mesh\'s most at the most, and says so', () => {
    const read = readGeneration('txt2img', { prompt: 'x', steps: 50 });
    expect(read.steps).toBe(LIMITS.steps.max);
    expect(read.notes['Steps asked']).toContain('50');
    expect(read.parameters.steps).toBe(50);
  });

  it('an override of the checkpoint is this request\'s, unless restore_afterwards is false', () => {
    expect(readGeneration('txt2img', { prompt: 'x', override_settings: { sd_model_checkpoint: 'sd15', CLIP_stop_at_last_layers: 2 } })).toMatchObject({ checkpoint: 'sd15', keepCheckpoint: false });
    expect(readGeneration('txt2img', { prompt: 'x', override_settings: { sd_model_checkpoint: 'sd15' }, override_settings_restore_afterwards: false })).toMatchObject({ keepCheckpoint: true });
  });

  it('refuses every field of a wrong type at once, in FastAPI\'s words, and the mesh\'s bounds as 422 issues', () => {
    expect(issuesOf('txt2img', { prompt: ['a'], steps: 'ten', styles: 'x', override_settings: 3, restore_faces: 'perhaps' }).map((issue) => [issue.loc.join('.'), issue.type])).toEqual([
      ['body.prompt', 'type_error.str'], ['body.styles', 'type_error.list'], ['body.steps', 'type_error.integer'], ['body.restore_faces', 'type_error.bool'],
      ['body.override_settings', 'type_error.dict'], ['body.prompt', 'value_error.missing'],
    ]);
    expect(issuesOf('txt2img', [1])).toEqual([{ loc: ['body'], msg: 'value is not a valid dict', type: 'type_error.dict' }]);
    const bounds = issuesOf('txt2img', { prompt: 'x', width: 2048, height: 4, seed: -2, steps: 0, batch_size: 4, n_iter: 3, negative_prompt: 'n'.repeat(LIMITS.promptChars + 1) });
    expect(bounds.map((issue) => [issue.loc[1], issue.type])).toEqual([
      ['negative_prompt', 'value_error.any_str.max_length'], ['width', 'value_error.number.not_le'], ['height', 'value_error.number.not_ge'],
      ['seed', 'value_error.number.not_ge'], ['steps', 'value_error.number.not_ge'], ['batch_size', 'value_error.number.not_le'],
    ]);
    expect(bounds.find((issue) => issue.loc[1] === 'batch_size')!.msg).toContain('batch_size × n_iter is 12');
    expect(issuesOf('txt2img', { prompt: 'x', override_settings: { sd_model_checkpoint: 7 } })[0]!.loc).toEqual(['body', 'override_settings', 'sd_model_checkpoint']);
  });

  it('img2img: one picture to start from, the strength, the mask\'s sense; the pictures are not echoed unless asked', () => {
    const read = readGeneration('img2img', { prompt: 'x', init_images: ['aGk='], mask: 'bWFzaw==', inpainting_mask_invert: 1, denoising_strength: '0.4' });
    expect(read).toMatchObject({ initImage: 'aGk=', mask: 'bWFzaw==', maskInvert: true, strength: 0.4 });
    expect(read.parameters).toMatchObject({ init_images: null, mask: null });
    expect(read.parameters).not.toHaveProperty('include_init_images');
    expect(readGeneration('img2img', { prompt: 'x', init_images: ['aGk='], include_init_images: true }).parameters.init_images).toEqual(['aGk=']);
    expect(readGeneration('img2img', { prompt: 'x', init_images: ['aGk='] }).strength).toBe(0.75);
    expect(issuesOf('img2img', { prompt: 'x' })[0]!.loc).toEqual(['body', 'init_images']);
    expect(issuesOf('img2img', { prompt: 'x', init_images: [3] })[0]!.loc).toEqual(['body', 'init_images', 0]);
    expect(issuesOf('img2img', { prompt: 'x', init_images: ['a', 'b'], denoising_strength: 2, inpainting_mask_invert: 2 }).map((issue) => issue.loc[1]))
      .toEqual(['init_images', 'denoising_strength', 'inpainting_mask_invert']);
  });
});

describe('the door\'s answers', () => {
  const checkpoint: Checkpoint = { title: 'gen [0123456789]', model_name: 'gen', hash: '0123456789', sha256: `0123456789${'a'.repeat(54)}`, filename: 'gen', config: null };

  it('finds a checkpoint by title, name, hash, or a title of another version', () => {
    const other: Checkpoint = { ...checkpoint, title: 'sd15 [abcdefabcd]', model_name: 'sd15', hash: 'abcdefabcd', sha256: 'abcdefabcd'.padEnd(64, '0') };
    for (const name of ['sd15 [abcdefabcd]', 'sd15', 'abcdefabcd', other.sha256, 'sd15 [9999999999]']) expect(findCheckpoint([checkpoint, other], name), name).toBe(other);
    expect(findCheckpoint([checkpoint, other], 'sdxl')).toBeUndefined();
  });

  it('info is A1111\'s JSON string: every seed, the pictures\' infotexts, what the mesh did otherwise, and the jobs', () => {
    const request = readGeneration('txt2img', { prompt: 'a fox', negative_prompt: 'blur', steps: 50, batch_size: 2, seed: 10 });
    const info = JSON.parse(infoOf({ request, checkpoint, seeds: [10, 11], keptSeeds: [11], width: 64, height: 32, steps: 32, timestamp: '20260101000000', jobIds: ['j_1', 'j_2'], version: '0.1.0' }));
    expect(info).toMatchObject({
      prompt: 'a fox', all_prompts: ['a fox', 'a fox'], negative_prompt: 'blur', seed: 10, all_seeds: [10, 11], width: 64, height: 32, steps: 32, batch_size: 2,
      sd_model_name: 'gen', sd_model_hash: '0123456789', job_ids: ['j_1', 'j_2'], extra_generation_params: { 'Steps asked': expect.stringContaining('50') },
    });
    expect(info.infotexts).toEqual([expect.stringMatching(/^a fox\nNegative prompt: blur\nSteps: 32, Sampler: Euler, CFG scale: 7, Seed: 11, Size: 64x32, Model hash: 0123456789, Model: gen, Steps asked: "50, run at/)]);
  });

  it('errors: a refused body is FastAPI\'s 422 list; the rest A1111\'s shape with the mesh\'s code and status', () => {
    const invalid = new BodyInvalid([{ loc: ['body', 'steps'], msg: 'value is not a valid integer', type: 'type_error.integer' }]);
    expect(invalid.message).toContain('steps: value is not a valid integer');
    expect(a1111ErrorBody(invalid)).toEqual({ status: 422, body: { detail: [{ loc: ['body', 'steps'], msg: 'value is not a valid integer', type: 'type_error.integer' }] } });
    expect(a1111ErrorBody(new MeshError('VALIDATION_FAILED', { detail: 'input.prompt: too long' }))).toEqual({ status: 422, body: { detail: [{ loc: ['body'], msg: 'input.prompt: too long', type: 'value_error' }] } });
    const missing = new MeshError('GRANT_MISSING');
    expect(a1111ErrorBody(missing)).toEqual({ status: 401, body: { error: 'GRANT_MISSING', detail: missing.message, body: '', errors: `401: ${missing.message}` } });
  });
});
