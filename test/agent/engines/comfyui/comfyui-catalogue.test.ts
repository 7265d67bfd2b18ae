import { describe, expect, it } from 'vitest';
import { trimCatalogue } from '../../../../src/agent/engines/comfyui/catalogue.js';
import { promptFor, withPictures } from '../../../../src/agent/engines/comfyui/workflow.js';
import { ComfyUiSettings } from '../../../../src/protocol/engines/comfyui.js';

/** A class as ComfyUI 0.3.x's /object_info gives it: tooltips, nested option values a catalogue leaves out. */
const RAW = {
  KSampler: {
    input: {
      required: {
        seed: ['INT', { default: 0, min: 0, max: 2 ** 53, control_after_generate: true, tooltip: 'The random seed used for creating the noise.' }],
        sampler_name: [['euler', 'heun'], { tooltip: 'The algorithm used when sampling.' }],
        scheduler: ['COMBO', { options: ['normal', 'karras'], remote: { route: '/internal/x', refresh: 5 } }],
        model: ['MODEL', { tooltip: 'The model used for denoising.' }],
      },
      hidden: { prompt: 'PROMPT' },
    },
    input_order: { required: ['seed', 'sampler_name', 'scheduler', 'model'] },
    output: ['LATENT'], output_is_list: [false], output_name: ['LATENT'], output_tooltips: ['The denoised latent.'],
    name: 'KSampler', display_name: 'KSampler', description: 'Uses the provided model…', python_module: 'nodes', category: 'sampling', output_node: false,
  },
};

describe('what an agent reports of its ComfyUI (trimCatalogue)', () => {
  it('keeps the inputs\' types, limits and choices, drops tooltips and nested option values', () => {
    const catalogue = trimCatalogue(RAW)!;
    expect(catalogue.KSampler!.input.required).toEqual({
      seed: ['INT', { default: 0, min: 0, max: 2 ** 53, control_after_generate: true }],
      sampler_name: [['euler', 'heun'], {}],
      scheduler: ['COMBO', { options: ['normal', 'karras'] }],
      model: ['MODEL', {}],
    });
    expect(catalogue.KSampler).toMatchObject({ output: ['LATENT'], category: 'sampling', output_node: false, name: 'KSampler' });
    expect(catalogue.KSampler).not.toHaveProperty('output_tooltips');
  });

  it('combos only, when the whole would not fit: what routing needs', () => {
    const catalogue = trimCatalogue(RAW, true)!;
    expect(Object.keys(catalogue.KSampler!.input.required!)).toEqual(['sampler_name', 'scheduler']);
    expect(catalogue.KSampler).not.toHaveProperty('description');
  });

  it('what is not an object of classes is no catalogue', () => {
    expect(trimCatalogue(null)).toBeNull();
    expect(trimCatalogue([1, 2])).toBeNull();
    expect(trimCatalogue({ '': {}, ok: 3 })).toEqual({});
  });
});

describe('what a ComfyUI job runs', () => {
  const owner = ComfyUiSettings.parse({ url: 'http://127.0.0.1:8188', acceptWorkflows: true });
  const workflow = { 1: { class_type: 'LoadImage', inputs: { image: 'photo.png' } }, 2: { class_type: 'SaveImage', inputs: { images: ['1', 0] } } };

  it('a client\'s workflow only where the host\'s owner accepts them; an empty graph is a probe; the model\'s own needs a template', () => {
    expect(promptFor(null, owner, 'comfy', { workflow })).toEqual({ kind: 'client', workflow });
    expect(promptFor(null, owner, 'comfy', { workflow: {} })).toEqual({ kind: 'probe' });
    expect(promptFor(null, ComfyUiSettings.parse({ url: 'http://127.0.0.1:8188' }), 'comfy', { workflow })).toMatchObject({ kind: 'refused', retryable: true });
    expect(promptFor(null, owner, 'comfy', { prompt: 'a template job' })).toMatchObject({ kind: 'refused', retryable: false });
  });

  it('the pictures\' names are rewritten to where they were uploaded, nothing else', () => {
    const rewritten = withPictures(workflow, new Map([['photo.png', 'gpumesh/gpumesh-j_1-0.png']]));
    expect(rewritten['1']!.inputs.image).toBe('gpumesh/gpumesh-j_1-0.png');
    expect(rewritten['2']).toEqual(workflow[2]);
    expect(workflow[1].inputs.image).toBe('photo.png');
  });
});
