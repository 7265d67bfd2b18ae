import { describe, expect, it } from 'vitest';
import { TensorBytesError, isWireDatatype, tensorFromBytes, tensorToBytes, type WireDatatype } from '../../src/protocol/index.js';

describe('the binary tensor data layout (one codec for the OIP front door and the OIP engine adapter)', () => {
  it('writes each datatype little-endian, row-major, and reads back what it wrote', () => {
    const cases: [WireDatatype, (number | boolean | string)[], string][] = [
      ['BOOL', [true, false, true], '010001'],
      ['UINT8', [0, 255], '00ff'],
      ['INT8', [-1, 1], 'ff01'],
      ['UINT16', [1, 65535], '0100ffff'],
      ['INT16', [-2], 'feff'],
      ['UINT32', [1], '01000000'],
      ['INT32', [-1, 7], 'ffffffff07000000'],
      ['UINT64', [2], '0200000000000000'],
      ['INT64', [-1], 'ffffffffffffffff'],
      ['FP16', [1, -2, 0.5], '003c00c00038'],
      ['BF16', [1, -2], '803f00c0'],
      ['FP32', [1.5], '0000c03f'],
      ['FP64', [-0.25], '000000000000d0bf'],
      ['BYTES', ['hé', ''], '0300000068c3a900000000'],
    ];
    for (const [datatype, values, hex] of cases) {
      const bytes = tensorToBytes(values, datatype);
      expect(bytes.toString('hex'), datatype).toBe(hex);
      expect(tensorFromBytes(bytes, datatype), datatype).toEqual(values);
    }
  });

  it('reads from a view inside a larger buffer (the bytes after a request\'s header)', () => {
    const body = Buffer.concat([Buffer.from('{"header":1}'), tensorToBytes([3, 4], 'INT32')]);
    expect(tensorFromBytes(body.subarray(12), 'INT32')).toEqual([3, 4]);
  });

  it('refuses bytes that are no whole tensor, saying why, and names no datatype it does not know', () => {
    expect(() => tensorFromBytes(Buffer.alloc(6), 'INT32')).toThrow(new TensorBytesError('6 bytes is not a whole number of INT32 elements (4 bytes each)'));
    expect(() => tensorFromBytes(Buffer.from([5, 0, 0]), 'BYTES')).toThrow('a BYTES element is cut off in its length');
    expect(() => tensorFromBytes(Buffer.from([5, 0, 0, 0, 65]), 'BYTES')).toThrow('a BYTES element is longer than what was sent');
    expect(isWireDatatype('BF16')).toBe(true);
    expect(isWireDatatype('FP8')).toBe(false);
    expect(() => tensorToBytes([1], 'FP8' as WireDatatype)).toThrow(TensorBytesError);
  });
});
