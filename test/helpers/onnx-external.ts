import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;

/**
 * An ONNX model whose one weight keeps its bytes outside the file, as large exported models do: y = x + w, UINT8 [4],
 * with `w` read by onnxruntime from `location` (4 bytes at offset 0). What an attacker's model file looks like when
 * `location` names a file of the host (`secret.key`, `../admin.grant`), and a legitimate two-file model when it names
 * the model's own data file.
 */
export function externalDataModel(location: string): Uint8Array<ArrayBuffer> {
  const tensor = { elemType: onnx.TensorProto.DataType.UINT8, shape: { dim: [{ dimValue: 4 }] } };
  const bytes = onnx.ModelProto.encode(onnx.ModelProto.create({
    irVersion: 8, opsetImport: [{ domain: '', version: 17 }], producerName: 'gpumesh-test',
    graph: {
      name: 'external', node: [{ opType: 'Add', input: ['x', 'w'], output: ['y'] }],
      initializer: [{
        name: 'w', dims: [4], dataType: onnx.TensorProto.DataType.UINT8, dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
        externalData: [{ key: 'location', value: location }, { key: 'offset', value: '0' }, { key: 'length', value: '4' }],
      }],
      input: [{ name: 'x', type: { tensorType: tensor } }],
      output: [{ name: 'y', type: { tensorType: tensor } }],
    },
  })).finish();
  return new Uint8Array(bytes);
}
