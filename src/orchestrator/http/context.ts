import type { GrantAuthority } from '../auth/index.js';
import type { Clock } from '../clock.js';
import type { MeshConfig } from '../config.js';
import type { JobEventBus } from '../events.js';
import type { JobService } from '../jobs/index.js';
import type { MeshMetrics } from '../metrics.js';
import type { AgentHub } from '../link/agent-hub.js';
import type { BlobReader, BlobStore, ModelRegistry } from '../registry/index.js';
import type { Scheduler } from '../scheduler/index.js';
import type { Db, GroupCommit } from '../store/index.js';

/** The parts of the orchestrator that route handlers use; built by the Orchestrator facade. */
export interface HttpContext {
  config: MeshConfig;
  clock: Clock;
  db: Db;
  commits: GroupCommit;
  blobs: BlobStore;
  /** Serves stored blobs, verified (blob-integrity). */
  blobReader: BlobReader;
  registry: ModelRegistry;
  authority: GrantAuthority;
  jobs: JobService;
  events: JobEventBus;
  hub: AgentHub;
  scheduler: Scheduler;
  metrics: MeshMetrics;
  webRoot: string;
}
