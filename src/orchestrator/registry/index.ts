export { BlobStore } from './blob-store.js';
export { BlobReader, type BlobReaderOptions, type ByteRange, type CorruptBlob, type OpenBlob } from './blob-reader.js';
export { ModelRegistry, type RegisteredModel, type RecordBlob } from './models.js';
export { PIPELINES, pipelineFor, type Pipeline } from './pipelines.js';
export { checkModelEntries, definitionDigest, modelDefinitions, unknownEngines, type ModelDefinition } from './declared-models.js';
export { ModelFiles } from './model-files.js';
export { assertDigest, sha256Digest } from '../../protocol/index.js';
