import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { MeshError, type Datatype, type TensorSpec } from '../../protocol/index.js';

// onnx-proto is a CommonJS module; its namespace object is the default export.
const { onnx } = onnxProto;
const TYPES = onnx.TensorProto.DataType;

/** ONNX element types and the OIP datatypes they are. */
const DATATYPE_OF: Readonly<Record<number, Datatype>> = {
  [TYPES.FLOAT]: 'FP32', [TYPES.UINT8]: 'UINT8', [TYPES.INT8]: 'INT8', [TYPES.UINT16]: 'UINT16', [TYPES.INT16]: 'INT16',
  [TYPES.INT32]: 'INT32', [TYPES.INT64]: 'INT64', [TYPES.STRING]: 'BYTES', [TYPES.BOOL]: 'BOOL', [TYPES.FLOAT16]: 'FP16',
  [TYPES.DOUBLE]: 'FP64', [TYPES.UINT32]: 'UINT32', [TYPES.UINT64]: 'UINT64',
};

/**
 * A model's inputs and outputs as its ONNX file declares them: each name, datatype and shape (a symbolic or missing
 * dimension is −1). Inputs that are initializers (weights an older exporter listed as inputs) are left out. A file
 * that is not an ONNX model, or declares a type gpumesh cannot carry, is INVALID_INPUT naming what is wrong.
 */
export function onnxSignature(bytes: Uint8Array, model: string): { inputs: TensorSpec[]; outputs: TensorSpec[] } {
  let decoded: ReturnType<typeof onnx.ModelProto.decode>;
  try {
    decoded = onnx.ModelProto.decode(bytes);
  } catch (error) {
    throw new MeshError('INVALID_INPUT', { model, detail: `the file is not an ONNX model (${(error as Error).message.slice(0, 120)})` }, { cause: error });
  }
  const graph = decoded.graph;
  if (!graph || !graph.output?.length) throw new MeshError('INVALID_INPUT', { model, detail: 'the file is not an ONNX model: it has no graph with outputs' });
  const weights = new Set((graph.initializer ?? []).map((tensor) => tensor.name));
  const spec = (value: OnnxTypes.IValueInfoProto, role: string): TensorSpec => {
    const tensor = value.type?.tensorType;
    const datatype = tensor?.elemType == null ? undefined : DATATYPE_OF[tensor.elemType];
    if (!datatype) throw new MeshError('INVALID_INPUT', { model, detail: `${role} ${value.name ?? '?'} is not a tensor of a type gpumesh carries` });
    const shape = (tensor!.shape?.dim ?? []).map((dim: OnnxTypes.TensorShapeProto.IDimension) => (dim.dimValue != null && Number(dim.dimValue) > 0 ? Number(dim.dimValue) : -1));
    return { name: value.name ?? '', datatype, shape };
  };
  return {
    inputs: (graph.input ?? []).filter((input) => !weights.has(input.name ?? '')).map((input) => spec(input, 'input')),
    outputs: graph.output.map((output) => spec(output, 'output')),
  };
}
