import { describe, expect, it } from 'vitest';
import {
  brokenLinks, comboChoices, doorPictureDigest, doorPictureName, indexCatalogue, misfits, NodeCatalogue, Workflow, WORKFLOW_LIMITS, WorkflowInput,
} from '../../src/protocol/index.js';

const HEX = 'ab'.repeat(32);

/** Two classes as ComfyUI's /object_info gives them: a legacy combo (the list as the type) and a COMBO with options. */
const CATALOGUE = NodeCatalogue.parse({
  CheckpointLoaderSimple: { input: { required: { ckpt_name: [['a.safetensors', 'b.safetensors'], {}] } }, output: ['MODEL', 'CLIP', 'VAE'], name: 'CheckpointLoaderSimple' },
  KSampler: {
    input: { required: { seed: ['INT', { min: 0 }], sampler_name: ['COMBO', { options: ['euler', 'heun'] }], model: ['MODEL'] } },
    output: ['LATENT'], name: 'KSampler',
  },
  LoadImage: { input: { required: { image: [['example.png'], { image_upload: true }] } }, output: ['IMAGE', 'MASK'], name: 'LoadImage' },
  SaveImage: { input: { required: { images: ['IMAGE'] } }, output: [], name: 'SaveImage', output_node: true },
});

const graph = (nodes: Record<string, { class_type: string; inputs: Record<string, unknown> }>): Workflow => Workflow.parse(nodes);

describe('workflows', () => {
  it('a workflow is bounded: one node at least, at most WORKFLOW_LIMITS.nodes, each with a class and at most 256 inputs', () => {
    expect(Workflow.safeParse({}).success).toBe(false);
    expect(Workflow.safeParse({ 1: { inputs: {} } }).success).toBe(false);
    const many = Object.fromEntries(Array.from({ length: WORKFLOW_LIMITS.nodes + 1 }, (_, i) => [String(i), { class_type: 'X', inputs: {} }]));
    expect(Workflow.safeParse(many).success).toBe(false);
    const wide = { 1: { class_type: 'X', inputs: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`i${i}`, i])) } };
    expect(Workflow.safeParse(wide).success).toBe(false);
    // ComfyUI's own keys beside a node's class and inputs (its title) are kept.
    expect(graph({ 1: { class_type: 'X', inputs: {}, _meta: { title: 'x' } } as never })['1']).toHaveProperty('_meta');
    expect(WorkflowInput.safeParse({ workflow: { 1: { class_type: 'X', inputs: {} } }, surprise: 1 }).success).toBe(false);
  });

  it('links that name no node are found', () => {
    expect(brokenLinks(graph({ 1: { class_type: 'A', inputs: { x: ['2', 0], y: ['1', 0], z: 'text' } } }))).toEqual([{ node: '1', classType: 'A', input: 'x', target: '2' }]);
  });

  it('door picture names carry their digest, under any subfolder, annotated or not; other values name none', () => {
    expect(doorPictureName(`sha256:${HEX}`, 'image/png')).toBe(`${HEX}.png`);
    expect(doorPictureName(`sha256:${HEX}`, 'image/jpeg')).toBe(`${HEX}.jpg`);
    expect(doorPictureName(`sha256:${HEX}`, 'video/mp4')).toBeNull();
    for (const value of [`${HEX}.png`, `clipspace/${HEX}.webp`, `${HEX}.png [input]`]) expect(doorPictureDigest(value)).toBe(`sha256:${HEX}`);
    for (const value of ['example.png', `${HEX}.gif`, `x${HEX}.png`, 42, null]) expect(doorPictureDigest(value)).toBeNull();
  });

  it('combo choices in either of ComfyUI\'s forms', () => {
    expect(comboChoices([['a', 'b'], {}])).toEqual(['a', 'b']);
    expect(comboChoices(['COMBO', { options: ['x'] }])).toEqual(['x']);
    expect(comboChoices(['INT', { min: 0 }])).toBeNull();
    expect(comboChoices('INT')).toBeNull();
  });

  it('a workflow fits a catalogue when it has every class and every combo value; links, other inputs and its own pictures are not judged', () => {
    const index = indexCatalogue(CATALOGUE);
    const fits = graph({
      4: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'b.safetensors' } },
      3: { class_type: 'KSampler', inputs: { seed: 5, sampler_name: 'heun', model: ['4', 0] } },
      1: { class_type: 'LoadImage', inputs: { image: `${HEX}.png` } },
      9: { class_type: 'SaveImage', inputs: { images: ['1', 0] } },
    });
    expect(misfits(fits, index, new Set([`${HEX}.png`]))).toEqual([]);
    expect(misfits(fits, index).map((misfit) => misfit.kind)).toEqual(['value_not_in_list']);
    const lacking = graph({
      4: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'c.safetensors' } },
      5: { class_type: 'Upscaler', inputs: {} },
      3: { class_type: 'KSampler', inputs: { sampler_name: 'ddim' } },
    });
    expect(misfits(lacking, index)).toEqual([
      { kind: 'value_not_in_list', node: '3', classType: 'KSampler', input: 'sampler_name', value: 'ddim', choices: ['euler', 'heun'] },
      { kind: 'value_not_in_list', node: '4', classType: 'CheckpointLoaderSimple', input: 'ckpt_name', value: 'c.safetensors', choices: ['a.safetensors', 'b.safetensors'] },
      { kind: 'missing_class', node: '5', classType: 'Upscaler' },
    ]);
  });

  it('a catalogue holds only scalars and lists of them in its options, and bounded lists', () => {
    expect(NodeCatalogue.safeParse({ X: { input: { required: { a: ['INT', { remote: { route: '/x' } }] } }, output: [], name: 'X' } }).success).toBe(false);
    expect(NodeCatalogue.safeParse({ X: { input: {}, output: [], name: 'X', description: 'x'.repeat(3000) } }).success).toBe(false);
  });
});
