/**
 * The mesh's lease, which a store shared by several orchestrators keeps (postgres/mesh-lease.ts): one orchestrator at a
 * time runs the mesh — admits and schedules jobs, holds the agents' links — and the others stand by, each trying to take
 * the lease over once it runs out (standby/). Each takeover adds one to the lease's epoch, and every transaction of the
 * holder checks its epoch (the `Fence`): a holder that lost the lease (paused, cut off) can no longer write, whatever
 * it believes.
 */
export interface MeshLease {
  /** This orchestrator, for as long as its process runs (a fresh id at every start). */
  readonly id: string;
  /** The fence while this orchestrator holds the lease; null otherwise. */
  fence(): Fence | null;
  /**
   * Take the lease if nobody holds it, its holder let it go, or its holder's has been seen run out for half a lease of
   * this orchestrator's own time; true if this orchestrator holds it now.
   */
  tryAcquire(): Promise<boolean>;
  /** Renew the lease; false when it is no longer this orchestrator's (another took it over after it ran out). */
  renew(): Promise<boolean>;
  /** Let the lease go at once (a clean shutdown), so a standby takes over without waiting for it to run out. */
  release(): Promise<void>;
  /** Who holds the mesh now, if anyone ever did. */
  holder(): Promise<LeaseHolder | null>;
  /** Say this orchestrator is alive, and in which role (GET /v1/status lists those seen lately). */
  heartbeat(role: 'active' | 'standby'): Promise<void>;
  /** The orchestrators seen within `withinMs`. */
  orchestrators(withinMs: number): Promise<OrchestratorRow[]>;
  /** The secret grants are signed with, shared by every orchestrator: `local` is kept if the store holds none yet. */
  sharedSecret(local: string): Promise<string>;
  /** Let go of the lease's own connections (after `release`, when the orchestrator has stopped). */
  close(): Promise<void>;
}

/** The epoch this orchestrator holds the mesh's lease with: every transaction checks it first. */
export interface Fence {
  holder: string;
  epoch: number;
}

/** Who holds the mesh now, as the lease says. */
export interface LeaseHolder {
  holder: string;
  url: string | null;
  epoch: number;
  /** Whether the lease has run out (its holder stopped renewing). */
  expired: boolean;
}

/** An orchestrator sharing the store, as GET /v1/status shows it. */
export interface OrchestratorRow {
  id: string;
  url: string | null;
  version: string;
  role: 'active' | 'standby';
  startedAt: string;
  seenAt: string;
}
