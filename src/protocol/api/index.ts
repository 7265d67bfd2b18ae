/**
 * The HTTP API's answers, each one zod schema with its type inferred from it (`/openapi.json` is made from the
 * schemas; the services build the answers as these types; the CLI reads them as these types), the events of its
 * streams, and the words its grant requests and the CLI share.
 */
export { ErrorEnvelope } from './errors.js';
export { Time } from './time.js';
export { RouteView, AttemptView, ArtifactView, JobView, JobAccepted, JobPage, BulkItemResult, BulkResults } from './jobs.js';
export { WaitingFor, ExplainView } from './explain.js';
export { PIPELINE_STATUSES, PipelineAccepted, PipelineEndSummary, PipelineView } from './pipelines.js';
export { BreakerView, ReplicaView, HostView, Hosts, Draining } from './hosts.js';
export { ReplicaState, ModelReplicas, StatusView, Live, Ready, DOORS, OpenDoorView, type DoorName } from './status.js';
export { DiskView, StorageView } from './storage.js';
export { SeriesView } from './series.js';
export { ModelVersion, Models, ModelFamily, ReplicaChange, LoadAnswer, UnloadAnswer } from './models.js';
export { GrantView, Minted, Narrowed, GrantPage, CapUse, GrantCapsView } from './grants.js';
export { AuditView, AuditPage } from './audit.js';
export { WebhookDeliveryView, WebhookDeliveries, WebhookSecretView } from './webhooks.js';
export { GalleryView, ArtifactPage, RemovedResults } from './gallery.js';
export { StoredBlob, ForgottenBlob, UploadView } from './blobs.js';
export { TERMINAL_EVENTS, EVENT_TYPES, isTerminalEvent } from './events.js';
export type { JobEvent, JobEventType, MeshEvent, MeshEventType, GrantEndedEvent } from './events.js';
export {
  caveatsFromOptions, galleryGrantOptions, meshViewGrantOptions, parseExpiry, GALLERY_ACTIONS, GALLERY_GRANT_SUMMARY, MESH_VIEW_ACTIONS, DURATION, type GrantOptions,
} from './grant-options.js';
