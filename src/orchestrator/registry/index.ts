export { BlobStore } from './blob-store.js';
export { BlobReader, type BlobReaderOptions, type ByteRange, type CorruptBlob, type OpenBlob } from './blob-reader.js';
export { ModelRegistry, type RegisteredModel } from './models.js';
export { PIPELINES, type Pipeline } from './pipelines.js';
export { assertDigest, sha256Digest } from '../../protocol/index.js';
