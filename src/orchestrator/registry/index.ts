export { ModelRegistry, type RegisteredModel, type RecordBlob } from './models.js';
export { ModelFiles } from './model-files.js';
