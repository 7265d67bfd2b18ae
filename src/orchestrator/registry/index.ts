export { BlobStore } from './blob-store.js';
export { ModelRegistry, type RegisteredModel } from './models.js';
export { PIPELINES, type Pipeline } from './pipelines.js';
export { assertDigest, isDigest, sha256Digest } from './digest.js';
