import type { Logger } from 'pino';
import pg from 'pg';
import type { Clock } from '../../../protocol/clock.js';
import type { Fence, LeaseHolder, MeshLease, OrchestratorRow } from '../contract/mesh-lease.js';
import { migratePostgres } from './migrate.js';

export interface MeshLeaseOptions {
  /** The database: postgres://user:password@host:port/database */
  databaseUrl: string;
  log: Logger;
  /** This orchestrator's time: how long it has seen a lease run out (the lease's own times are the database's). */
  clock: Clock;
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

/**
 * The mesh's lease on connections of its own — its renewals never wait behind the store's, and give up on a dead
 * server quickly — with the schema brought up to date first (under the migrations' advisory lock, as the store's).
 */
export async function openMeshLease(options: MeshLeaseOptions): Promise<MeshLease> {
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 2, connectionTimeoutMillis: 1000, query_timeout: 2000 });
  pool.on('error', (error) => options.log.warn({ err: error }, 'a PostgreSQL connection of the lease was lost'));
  try {
    await migratePostgres(pool, options.clock);
  } catch (error) {
    await pool.end().catch(() => {});
    throw error;
  }
  return new PgMeshLease(pool, options);
}

/**
 * The mesh's lease in PostgreSQL (contract/mesh-lease.ts says what it is for): a row of `mesh_lease` with a holder and
 * an epoch, which every transaction of the holder checks (PgCommits, `gpumesh_hold_lease`).
 *
 * Time is the database's (`now()`): orchestrators on several machines need not agree on the time of day.
 */
class PgMeshLease implements MeshLease {
  readonly #pool: pg.Pool;
  readonly #options: MeshLeaseOptions;
  #epoch: number | null = null;
  /** The run-out lease seen last, and when (the clock's time): taken over only if it is still the same half a lease later. */
  #sawExpired: { holder: string; epoch: number; at: number } | null = null;

  constructor(pool: pg.Pool, options: MeshLeaseOptions) {
    this.#pool = pool;
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
    const { id, url, ttlMs, clock } = this.#options;
    const pool = this.#pool;
    const current = await this.holder();
    if (current && current.holder !== RELEASED) {
      if (!current.expired) {
        this.#sawExpired = null;
        return false;
      }
      const seen = this.#sawExpired;
      if (!seen || seen.holder !== current.holder || seen.epoch !== current.epoch) {
        this.#sawExpired = { holder: current.holder, epoch: current.epoch, at: clock.now() };
        return false;
      }
      if (clock.now() - seen.at < ttlMs / 2) return false;
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
    const { id, ttlMs } = this.#options;
    const result = await this.#pool.query(`UPDATE mesh_lease SET expires_at = now() + $1 * interval '1 millisecond'
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
    await this.#pool.query(`UPDATE mesh_lease SET holder = $3, holder_url = NULL, expires_at = now() - interval '1 millisecond'
      WHERE name = 'mesh' AND holder = $1 AND epoch = $2`, [this.#options.id, epoch, RELEASED]);
  }

  async holder(): Promise<LeaseHolder | null> {
    const { rows } = await this.#pool.query<{ holder: string; holder_url: string | null; epoch: number; expired: boolean }>(
      "SELECT holder, holder_url, epoch, expires_at < now() AS expired FROM mesh_lease WHERE name = 'mesh'");
    const row = rows[0];
    return row ? { holder: row.holder, url: row.holder_url, epoch: Number(row.epoch), expired: row.expired } : null;
  }

  /** Say this orchestrator is alive, and in which role (GET /v1/status lists those seen lately). */
  async heartbeat(role: 'active' | 'standby'): Promise<void> {
    const { id, url, version } = this.#options;
    await this.#pool.query(`INSERT INTO orchestrators (id, url, version, started_at, seen_at, role) VALUES ($1, $2, $3, now(), now(), $4)
      ON CONFLICT (id) DO UPDATE SET seen_at = now(), role = excluded.role, url = excluded.url`, [id, url, version, role]);
  }

  /** The orchestrators seen within `withinMs` (the others' heartbeats come every third of the lease). */
  async orchestrators(withinMs: number): Promise<OrchestratorRow[]> {
    const { rows } = await this.#pool.query<{ id: string; url: string | null; version: string; role: 'active' | 'standby'; started_at: Date; seen_at: Date }>(
      `SELECT id, url, version, role, started_at, seen_at FROM orchestrators WHERE seen_at > now() - $1 * interval '1 millisecond' ORDER BY started_at`, [withinMs]);
    return rows.map((row) => ({ id: row.id, url: row.url, version: row.version, role: row.role, startedAt: row.started_at.toISOString(), seenAt: row.seen_at.toISOString() }));
  }

  /** The secret grants are signed with, shared by every orchestrator: `local` is kept if the store holds none yet. */
  async sharedSecret(local: string): Promise<string> {
    const pool = this.#pool;
    await pool.query("INSERT INTO mesh_secrets (name, value) VALUES ('grant-root-key', $1) ON CONFLICT (name) DO NOTHING", [local]);
    const { rows } = await pool.query<{ value: string }>("SELECT value FROM mesh_secrets WHERE name = 'grant-root-key'");
    return rows[0]!.value;
  }

  async close(): Promise<void> {
    await this.#pool.end();
  }
}
