import type { Logger } from 'pino';
import type pg from 'pg';
import type { Fence } from './pg-commits.js';

export interface MeshLeaseOptions {
  pool: pg.Pool;
  log: Logger;
  /** This orchestrator, for as long as its process runs (a fresh id at every start). */
  id: string;
  /** Where it serves clients and agents (shown to the others, and to clients a standby turns away). */
  url: string | null;
  version: string;
  /** How long a lease holds without renewal (ms). A standby takes over this long after the active one stops. */
  ttlMs: number;
}

/** The holder of a lease let go on purpose (a clean shutdown): a standby takes it at its next look. */
const RELEASED = '';

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

/**
 * The mesh's lease in PostgreSQL: one orchestrator at a time runs the mesh — admits and schedules jobs, holds the
 * agents' links — and the others stand by, each trying to take the lease over once it runs out. Each takeover adds
 * one to the lease's epoch, and every transaction of the holder checks its epoch (PgCommits): a holder that lost the
 * lease (paused, cut off) can no longer write, whatever it believes.
 *
 * Time is the database's (`now()`): orchestrators on several machines need not agree on the time of day.
 */
export class MeshLease {
  readonly #options: MeshLeaseOptions;
  #epoch: number | null = null;
  /** The run-out lease seen last, and when (performance.now()): taken over only if it is still the same half a lease later. */
  #sawExpired: { holder: string; epoch: number; at: number } | null = null;

  constructor(options: MeshLeaseOptions) {
    this.#options = options;
  }

  /** The fence while this orchestrator holds the lease; null otherwise. */
  fence(): Fence | null {
    return this.#epoch === null ? null : { holder: this.#options.id, epoch: this.#epoch };
  }

  get id(): string {
    return this.#options.id;
  }

  /**
   * Take the lease if nobody holds it, its holder let it go, or its holder's has been seen run out for half a lease of
   * this orchestrator's own time; true if this orchestrator holds it now. Seeing it run out once is not enough: when
   * PostgreSQL comes back from a restart every lease has run out by the database's clock, and a holder that is alive
   * renews within a third of a lease — it should not lose the mesh to a database restart.
   */
  async tryAcquire(): Promise<boolean> {
    const { pool, id, url, ttlMs } = this.#options;
    const current = await this.holder();
    if (current && current.holder !== RELEASED) {
      if (!current.expired) {
        this.#sawExpired = null;
        return false;
      }
      const seen = this.#sawExpired;
      if (!seen || seen.holder !== current.holder || seen.epoch !== current.epoch) {
        this.#sawExpired = { holder: current.holder, epoch: current.epoch, at: performance.now() };
        return false;
      }
      if (performance.now() - seen.at < ttlMs / 2) return false;
    }
    const { rows } = await pool.query<{ epoch: string }>(`
      INSERT INTO mesh_lease (name, holder, holder_url, epoch, expires_at) VALUES ('mesh', $1, $2, 1, now() + $3 * interval '1 millisecond')
      ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, holder_url = excluded.holder_url, epoch = mesh_lease.epoch + 1, expires_at = excluded.expires_at
        WHERE mesh_lease.expires_at < now() AND mesh_lease.epoch = $4
      RETURNING epoch`, [id, url, ttlMs, current?.epoch ?? 0]);
    this.#sawExpired = null;
    if (rows.length === 0) return false;
    // BIGINT arrives as text from a pool without the store's type parsers.
    this.#epoch = Number(rows[0]!.epoch);
    this.#options.log.info({ epoch: this.#epoch, orchestrator: id }, 'took the mesh lease: this orchestrator runs the mesh');
    return true;
  }

  /**
   * Renew the lease; false when it is no longer this orchestrator's (another took it over after it ran out). A lease
   * that ran out but that nobody took is still ours: the epoch decides, not the clock.
   */
  async renew(): Promise<boolean> {
    if (this.#epoch === null) return false;
    const { pool, id, ttlMs } = this.#options;
    const result = await pool.query(`UPDATE mesh_lease SET expires_at = now() + $1 * interval '1 millisecond'
      WHERE name = 'mesh' AND holder = $2 AND epoch = $3`, [ttlMs, id, this.#epoch]);
    if (result.rowCount === 1) return true;
    this.#epoch = null;
    return false;
  }

  /** Let the lease go at once (a clean shutdown), so a standby takes over without waiting for it to run out. */
  async release(): Promise<void> {
    if (this.#epoch === null) return;
    const epoch = this.#epoch;
    this.#epoch = null;
    await this.#options.pool.query(`UPDATE mesh_lease SET holder = $3, holder_url = NULL, expires_at = now() - interval '1 millisecond'
      WHERE name = 'mesh' AND holder = $1 AND epoch = $2`, [this.#options.id, epoch, RELEASED]);
  }

  async holder(): Promise<LeaseHolder | null> {
    const { rows } = await this.#options.pool.query<{ holder: string; holder_url: string | null; epoch: number; expired: boolean }>(
      "SELECT holder, holder_url, epoch, expires_at < now() AS expired FROM mesh_lease WHERE name = 'mesh'");
    const row = rows[0];
    return row ? { holder: row.holder, url: row.holder_url, epoch: Number(row.epoch), expired: row.expired } : null;
  }

  /** Say this orchestrator is alive, and in which role (GET /v1/status lists those seen lately). */
  async heartbeat(role: 'active' | 'standby'): Promise<void> {
    const { pool, id, url, version } = this.#options;
    await pool.query(`INSERT INTO orchestrators (id, url, version, started_at, seen_at, role) VALUES ($1, $2, $3, now(), now(), $4)
      ON CONFLICT (id) DO UPDATE SET seen_at = now(), role = excluded.role, url = excluded.url`, [id, url, version, role]);
  }

  /** The orchestrators seen within `withinMs` (the others' heartbeats come every third of the lease). */
  async orchestrators(withinMs: number): Promise<OrchestratorRow[]> {
    const { rows } = await this.#options.pool.query<{ id: string; url: string | null; version: string; role: 'active' | 'standby'; started_at: Date; seen_at: Date }>(
      `SELECT id, url, version, role, started_at, seen_at FROM orchestrators WHERE seen_at > now() - $1 * interval '1 millisecond' ORDER BY started_at`, [withinMs]);
    return rows.map((row) => ({ id: row.id, url: row.url, version: row.version, role: row.role, startedAt: row.started_at.toISOString(), seenAt: row.seen_at.toISOString() }));
  }

  /** The secret grants are signed with, shared by every orchestrator: `local` is kept if the store holds none yet. */
  async sharedSecret(local: string): Promise<string> {
    const { pool } = this.#options;
    await pool.query("INSERT INTO mesh_secrets (name, value) VALUES ('grant-root-key', $1) ON CONFLICT (name) DO NOTHING", [local]);
    const { rows } = await pool.query<{ value: string }>("SELECT value FROM mesh_secrets WHERE name = 'grant-root-key'");
    return rows[0]!.value;
  }
}
