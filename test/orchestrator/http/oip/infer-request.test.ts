import { describe, expect, it } from 'vitest';
import { InferRequest, readInferRequest } from '../../../../src/orchestrator/http/oip/infer-request.js';

const input = (more: Record<string, unknown> = {}): Record<string, unknown> => ({ name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: [1, 2], ...more });
const request = (more: Record<string, unknown> = {}): Record<string, unknown> => ({ inputs: [input(), input({ name: 'INPUT1' })], ...more });

/** Requests the schema takes and refuses, near the edges of each field. */
const CASES: unknown[] = [
  request(), request({ id: 'r1' }), request({ id: 'x'.repeat(200) }), request({ id: 'x'.repeat(201) }), request({ id: 7 }), request({ id: null }),
  request({ parameters: {} }), request({ parameters: { binary_data_output: true } }), request({ parameters: [] }), request({ parameters: null }), request({ parameters: 'x' }),
  request({ inputs: [] }), request({ inputs: Array.from({ length: 64 }, () => input()) }), request({ inputs: Array.from({ length: 65 }, () => input()) }), request({ inputs: {} }), request({ inputs: null }),
  request({ inputs: [input({ name: '' })] }), request({ inputs: [input({ name: 'n'.repeat(200) })] }), request({ inputs: [input({ name: 'n'.repeat(201) })] }), request({ inputs: [input({ name: 3 })] }),
  request({ inputs: [input({ shape: [] })] }), request({ inputs: [input({ shape: Array.from({ length: 16 }, () => 1) })] }), request({ inputs: [input({ shape: Array.from({ length: 17 }, () => 1) })] }),
  request({ inputs: [input({ shape: [-1] })] }), request({ inputs: [input({ shape: [1.5] })] }), request({ inputs: [input({ shape: [2 ** 53] })] }), request({ inputs: [input({ shape: ['1'] })] }), request({ inputs: [input({ shape: null })] }),
  request({ inputs: [input({ shape: [-0] })] }), request({ inputs: [input({ datatype: 'INT31' })] }), request({ inputs: [input({ datatype: 'BYTES' })] }), request({ inputs: [input({ datatype: undefined })] }),
  request({ inputs: [input({ parameters: { binary_data_size: 64 } })] }), request({ inputs: [input({ parameters: [] })] }), request({ inputs: [input({ parameters: null })] }),
  request({ inputs: [input({ data: undefined })] }), request({ inputs: [input({ data: null })] }), request({ inputs: [input({ extra: 1 })] }), request({ inputs: [[1]] }), request({ inputs: [null] }),
  request({ outputs: [] }), request({ outputs: [{ name: 'OUTPUT0' }] }), request({ outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }] }), request({ outputs: [{ name: '' }] }),
  request({ outputs: [{ name: 'OUTPUT0', parameters: [] }] }), request({ outputs: [{}] }), request({ outputs: null }), request({ outputs: {} }), request({ outputs: Array.from({ length: 65 }, () => ({ name: 'o' })) }),
  request({ extra: { deep: [1] } }), null, [], 'text', 7, {},
];

describe('an OIP infer request read (readInferRequest)', () => {
  it('takes exactly what the schema takes, and refuses the rest in its words', () => {
    for (const value of CASES) {
      const parsed = InferRequest.safeParse(value);
      if (parsed.success) {
        // What the route reads of it is what the schema's pass would have given.
        const read = readInferRequest(value);
        expect(JSON.parse(JSON.stringify(InferRequest.parse(read)))).toEqual(JSON.parse(JSON.stringify(parsed.data)));
        expect(read.inputs.map((entry) => [entry.name, entry.shape, entry.datatype, entry.parameters, entry.data])).toEqual(parsed.data.inputs.map((entry) => [entry.name, entry.shape, entry.datatype, entry.parameters, entry.data]));
        expect([read.id, read.parameters, read.outputs]).toEqual([parsed.data.id, parsed.data.parameters, parsed.data.outputs]);
      } else {
        expect(() => readInferRequest(value), JSON.stringify(value)?.slice(0, 120)).toThrow(expect.objectContaining({ code: 'BAD_REQUEST' }));
      }
    }
  });

  it('a refusal names the field, as the schema words it', () => {
    expect(() => readInferRequest(request({ inputs: [input({ shape: [-1] })] }))).toThrow(/inputs\.0\.shape\.0: /);
    expect(() => readInferRequest({})).toThrow(/inputs: /);
  });
});
