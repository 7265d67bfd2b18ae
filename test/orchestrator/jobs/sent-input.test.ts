import { join } from 'node:path';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../../src/orchestrator/config/config.js';
import { Orchestrator } from '../../../src/orchestrator/index.js';
import { removeDir, tempDir } from '../../helpers/mesh.js';

/**
 * A job's input is stored as its client sent it where that is exactly the input admitted (JobAdmission, sentInput):
 * the row holds the request's own text, which reads back as the same input; where the job type's handling made
 * another input (a seed drawn, a normal form), or the text could be read two ways, the row holds the input written out.
 * No agent runs here: the jobs stay queued, which is all the rows need.
 */
describe('the input a job\'s row holds', () => {
  let data: string | undefined;
  afterEach(() => {
    if (data) removeDir(data);
  });

  it('is the text the client sent for an input admitted as sent, and the input written out otherwise', async () => {
    data = tempDir();
    const orchestrator = await Orchestrator.create({ config: resolveConfig({ server: { port: 0 } }, data), logger: pino({ level: 'silent' }) });
    const reader = new Database(join(data, 'store.sqlite'), { readonly: true });
    const stored = reader.prepare('SELECT input FROM jobs WHERE id = ?').pluck();
    try {
      const url = await orchestrator.listen();
      const headers = { authorization: `Bearer ${orchestrator.adminGrant()}`, 'content-type': 'application/json' };
      const submit = async (body: string, extra: Record<string, string> = {}): Promise<{ id: string; input: unknown }> => {
        const response = await fetch(`${url}/v1/jobs`, { method: 'POST', headers: { ...headers, ...extra }, body });
        expect(response.status, await response.clone().text()).toBe(202);
        const { id } = await response.json() as { id: string };
        const view = await (await fetch(`${url}/v1/jobs/${id}`, { headers })).json() as { input: unknown };
        return { id, input: view.input };
      };

      // A tensor for mlp (64 values), spaced and with numbers in other notations: its text as sent, which reads back as
      // the same numbers.
      const values = ['1.50', '2e0', '-0.25', ...Array.from({ length: 61 }, (_, i) => `${i}.0`)];
      const sent = `{ "x" : [ ${values.join(',\n ')} ] }`;
      const tensor = await submit(`{"type":"tensor",  "input" : ${sent} }`);
      expect(stored.get(tensor.id)).toBe(sent);
      expect(tensor.input).toEqual({ x: values.map(Number) });

      // A client that waits for the end (written when its wait runs out, as it stands): the same.
      const waited = await submit(`{"input":${sent},"type":"tensor"}`, { prefer: 'wait=1' });
      expect(stored.get(waited.id)).toBe(sent);

      // An image without a seed: its handling draws one, so the row holds the input admitted, seed and all.
      const image = await submit('{"type":"image","input":{ "prompt" : "a lighthouse", "width": 8, "height": 8, "steps": 1 }}');
      const imageInput = JSON.parse(stored.get(image.id) as string) as Record<string, unknown>;
      expect(imageInput).toEqual(image.input);
      expect(imageInput).toMatchObject({ prompt: 'a lighthouse', seed: expect.any(Number) as number });

      // A name given twice inside the input: JSON.parse kept the last, SQLite's JSON functions would read the first.
      const twice = await submit(`{"type":"tensor","input":{"x":[${values.map(() => '0').join(',')}],"x":${JSON.stringify(values.map(Number))}}}`);
      expect(stored.get(twice.id)).toBe(JSON.stringify({ x: values.map(Number) }));

      // `\u0069nput` is `input` to the parser: the text is not cut (it could be read two ways), the input is written out.
      const escaped = await submit(`{"type":"tensor","\\u0069nput":${sent}}`);
      expect(stored.get(escaped.id)).toBe(JSON.stringify({ x: values.map(Number) }));
    } finally {
      reader.close();
      await orchestrator.close();
    }
  });
});
