export { ConfigError, ERRORS, ErrorBody, MeshError, formatError, isErrorCode } from './errors.js';
export type { ErrorCode } from './errors.js';
export {
  JOB_STATUSES, TERMINAL_STATUSES, isTerminal, LIMITS, ImageInput, VideoInput, TensorInput, INPUT_SCHEMAS, SubmitJobBody, BlobDigest, INPUT_IMAGE_FIELDS,
  JobReference, picturesIn,
} from './jobs.js';
export type { JobStatus, InputImageField } from './jobs.js';
export { StepId, StepReference, PipelineStep, SubmitPipelineBody } from './pipelines.js';
export { ModelManifest, VERSION_SEPARATOR, familyOf, modelDigests } from './models.js';
export {
  LINK_PROTOCOL_VERSION, LINK_PATH, LINK_CLOSE, LINK_LIMITS, Device, HostAway, ResidentModel, ToolReport, UnavailableClass, ArtifactReport, Timings, LoadPhases, BatchMemoryReport, pixelsOf, AgentMessage, OrchestratorMessage, RunJob,
  RelayHeaders, RelayRequest,
} from './link.js';
export { DIGEST_PATTERN, sha256Digest, assertDigest } from './digest.js';
export { inspectGrant } from './grant-token.js';
export { ROUTE_SKIP_REASONS, BREAKER_STATES } from './routing.js';
export type { RouteSkipReason, BreakerState } from './routing.js';
export { DATATYPES, JOB_DATATYPES, DATATYPE_BYTES, TensorSpec, elementsOf, batchesAlongFirstDim, halfToNumber, numberToHalf } from './tensors.js';
export type { Datatype } from './tensors.js';
export { TensorBytesError, isWireDatatype, tensorFromBytes, tensorToBytes, type WireDatatype } from './tensor-bytes.js';
export {
  WORKFLOW_LIMITS, CATALOGUE_LIMITS, Workflow, WorkflowInput, NodeCatalogue, NodeClassInfo, isLink, doorPictureName, doorPictureDigest, comboChoices,
  indexCatalogue, misfits, describeMisfit, DOOR_PICTURE_NAME, brokenLinks,
} from './workflows.js';
export type { CatalogueIndex, WorkflowMisfit, BrokenLink } from './workflows.js';
