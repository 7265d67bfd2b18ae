import { describe, expect, it } from 'vitest';
import { misfitBody } from '../../../../src/orchestrator/http/comfyui/errors.js';
import { digestOfFileName, failedNode, fileNameOf, outputsOf, promptFields } from '../../../../src/orchestrator/http/comfyui/outputs.js';
import { PromptBook } from '../../../../src/orchestrator/http/comfyui/prompt-book.js';
import type { JobRecord } from '../../../../src/orchestrator/store/index.js';

const digest = (char: string): string => `sha256:${char.repeat(64)}`;
const artifact = (char: string, mediaType = 'image/png') => ({ digest: digest(char), mediaType });

describe('the ComfyUI door\'s parts', () => {
  it('files are named by their digest and read back from the name; any other name names nothing', () => {
    expect(fileNameOf(digest('a'), 'image/png')).toBe(`${'a'.repeat(64)}.png`);
    expect(fileNameOf(digest('a'), 'video/mp4')).toBe(`${'a'.repeat(64)}.mp4`);
    expect(digestOfFileName(`${'a'.repeat(64)}.png`)).toBe(digest('a'));
    expect(digestOfFileName('ComfyUI_00001_.png')).toBeNull();
    expect(digestOfFileName(`../${'a'.repeat(64)}.png`)).toBeNull();
  });

  it('a job\'s files by the node that made each, as its result says; a clip is animated; files no node claims go to the last node', () => {
    const view = {
      input: { workflow: { 9: { class_type: 'SaveImage', inputs: {} }, 12: { class_type: 'PreviewImage', inputs: {} } } },
      artifacts: [artifact('a'), artifact('b'), artifact('c', 'video/mp4'), artifact('d')],
      result: { outputs: [{ node: '9', type: 'output', digest: digest('a') }, { node: '12', type: 'temp', digest: digest('b') }, { node: '9', type: 'output', digest: digest('c') }] },
    } as never;
    expect(outputsOf(view)).toEqual({
      9: { images: [{ filename: `${'a'.repeat(64)}.png`, subfolder: '', type: 'output' }, { filename: `${'c'.repeat(64)}.mp4`, subfolder: '', type: 'output' }], animated: [true] },
      12: { images: [{ filename: `${'b'.repeat(64)}.png`, subfolder: '', type: 'temp' }, { filename: `${'d'.repeat(64)}.png`, subfolder: '', type: 'output' }] },
    });
  });

  it('where a job failed, from its error as the agent words it; a prompt\'s fields with its client id in extra_data', () => {
    expect(failedNode('ComfyUI at http://x: node 9 (SaveImage) failed: Exception: no')).toEqual({ node: '9', type: 'SaveImage' });
    expect(failedNode('the batch took too long')).toEqual({ node: null, type: null });
    expect(promptFields({ promptId: 'p', clientId: 'c', extraData: { a: 1 } })).toEqual({ promptId: 'p', clientId: 'c', extraData: { a: 1, client_id: 'c' } });
  });

  it('what no host has, in ComfyUI\'s words: a missing class first, else each node\'s values not in its list', () => {
    expect(misfitBody([
      { kind: 'value_not_in_list', node: '4', classType: 'CheckpointLoaderSimple', input: 'ckpt_name', value: 'x', choices: ['a'] },
      { kind: 'missing_class', node: '10', classType: 'NoSuchNode' },
    ]).error).toEqual({ type: 'invalid_prompt', message: 'Cannot execute because node NoSuchNode does not exist.', details: 'Node ID \'#10\'', extra_info: {} });
    const body = misfitBody([{ kind: 'value_not_in_list', node: '4', classType: 'CheckpointLoaderSimple', input: 'ckpt_name', value: 'x', choices: ['a'] }]);
    expect(body.error.type).toBe('prompt_outputs_failed_validation');
    expect(body.node_errors['4']).toEqual({
      errors: [{ type: 'value_not_in_list', message: 'Value not in list', details: 'ckpt_name: \'x\' not in ["a"]', extra_info: { input_name: 'ckpt_name' } }],
      dependent_outputs: [], class_type: 'CheckpointLoaderSimple',
    });
  });

  it('the prompt book keeps each lineage\'s newest 1,000 prompts, oldest first, and a prompt id once', () => {
    const book = new PromptBook();
    const job = (id: string) => ({ id, status: 'queued' }) as JobRecord;
    for (let i = 0; i < 1005; i++) book.add('g1', { promptId: `p${i}`, job: job(`j${i}`) });
    book.add('g1', { promptId: 'p1004', job: job('again') });
    const entries = book.entries('g1');
    expect(entries).toHaveLength(1000);
    expect(entries[0]!.promptId).toBe('p5');
    expect(entries.at(-1)!.job.id).toBe('again');
    expect(book.get('g2', 'p5')).toBeUndefined();
    expect(book.get('g1', 'p5')!.job.id).toBe('j5');
  });

  it('the prompt book is bounded as a whole: past it, the least recently used lineage\'s oldest prompts go first', () => {
    const book = new PromptBook({ perLineage: 4, total: 6 });
    const entry = (promptId: string) => ({ promptId, job: { id: `j-${promptId}`, status: 'queued' } as JobRecord });
    for (const id of ['a1', 'a2', 'a3']) book.add('a', entry(id));
    for (const id of ['b1', 'b2', 'b3']) book.add('b', entry(id));
    book.add('c', entry('c1'));
    expect(book.entries('a').map((each) => each.promptId)).toEqual(['a2', 'a3']);
    for (const id of ['c2', 'c3']) book.add('c', entry(id));
    // Lineage a has gone entirely; then b, used after it, gives up its oldest.
    expect(book.entries('a')).toEqual([]);
    expect(book.entries('b').map((each) => each.promptId)).toEqual(['b1', 'b2', 'b3']);
    book.add('c', entry('c4'));
    expect(book.entries('b').map((each) => each.promptId)).toEqual(['b2', 'b3']);
    expect(book.entries('c').map((each) => each.promptId)).toEqual(['c1', 'c2', 'c3', 'c4']);
  });
});
