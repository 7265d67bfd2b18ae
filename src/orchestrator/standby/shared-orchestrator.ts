import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import pg from 'pg';
import type { MeshConfig, PostgresStoreSettings } from '../config/config.js';
import { Orchestrator } from '../orchestrator.js';
import { secretFile } from '../secret-file.js';
import { newId } from '../store/ids.js';
import { MeshLease } from '../store/postgres/mesh-lease.js';
import { migratePostgres } from '../store/postgres/migrate.js';
import { PostgresStore } from '../store/postgres/postgres-store.js';
import { VERSION } from '../../version.js';
import { StandbyServer } from './standby-server.js';

export interface SharedMeshOptions {
  config: MeshConfig;
  logger: Logger;
  /** This orchestrator lost the mesh lease while it ran the mesh: it must stop at once (the CLI exits; a supervisor restarts it as a standby). */
  onLeaseLost(reason: string): void;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * An orchestrator that shares a PostgreSQL store with others (`store: {kind: postgres}`). It binds its port at once,
 * and stands by — answering NOT_LEADER, so clients and agents with several URLs go on to the next — until it holds
 * the mesh lease: then it runs the mesh on that port, from what the store holds (queued jobs back in their queues,
 * jobs in flight waiting for their agents to reconnect and claim them, as after a restart), renewing the lease every
 * third of its length. Resolves with the running orchestrator.
 *
 * Why one active orchestrator rather than several dispatching at once: batching and routing want one view of every
 * queue and every host (a batch forms from whatever waits for a model, a host is chosen among all that could take
 * it), and one orchestrator admits and dispatches thousands of jobs a second, more than any mesh of GPUs runs. What a
 * studio needs from more orchestrators is that the mesh outlives the box one runs on; docs/architecture.md says more.
 */
export async function startSharedOrchestrator(options: SharedMeshOptions): Promise<Orchestrator> {
  const { config, logger } = options;
  const settings = config.store as PostgresStoreSettings;
  const log = logger.child({ part: 'lease' });
  // The lease's own connections: its renewals never wait behind the store's, and give up on a dead server quickly.
  const pool = new pg.Pool({ connectionString: settings.url, max: 2, connectionTimeoutMillis: 1000, query_timeout: 2000 });
  pool.on('error', (error) => log.warn({ err: error }, 'a PostgreSQL connection of the lease was lost'));
  const standby = await StandbyServer.listen({
    host: config.server.host, port: config.server.port, retryAfterS: Math.ceil(settings.leaseMs / 1000), active: () => ({ url: activeUrl }),
  });
  let activeUrl: string | null = null;
  config.server.port = standby.port;
  // What the others and the clients a standby turns away are told: publicUrl, else this host by name when it listens
  // on every address (0.0.0.0 is nobody's address), else the address it listens on.
  const everywhere = config.server.host === '0.0.0.0' || config.server.host === '::';
  const url = config.server.publicUrl ?? `${config.server.tls.enabled ? 'https' : 'http'}://${everywhere ? hostname() : config.server.host}:${standby.port}`;
  const lease = new MeshLease({ pool, log, id: newId('o'), url, version: VERSION, ttlMs: settings.leaseMs });
  let standingBy = false;
  try {
    await migratePostgres(pool);
    for (;;) {
      try {
        if (await lease.tryAcquire()) break;
        const holder = await lease.holder();
        activeUrl = holder?.url ?? null;
        await lease.heartbeat('standby');
        if (!standingBy) log.info({ orchestrator: lease.id, active: activeUrl, url }, 'standing by: another orchestrator runs the mesh; this one takes over when its lease runs out');
        standingBy = true;
      } catch (error) {
        log.warn({ err: error }, 'PostgreSQL does not answer; standing by');
      }
      await sleep(settings.leaseMs / 3 + Math.random() * 100);
    }
  } catch (error) {
    await standby.close();
    await pool.end().catch(() => {});
    throw error;
  }
  await standby.close();

  let lost = false;
  const loseLease = (reason: string): void => {
    if (lost) return;
    lost = true;
    log.fatal({ orchestrator: lease.id, reason }, 'this orchestrator lost the mesh lease: it stops');
    options.onLeaseLost(reason);
  };
  const localKey = secretFile(join(config.data, 'secret.key'), () => randomBytes(32).toString('base64'));
  const rootKey = Buffer.from(await lease.sharedSecret(localKey), 'base64');
  const store = await PostgresStore.open({
    url: settings.url, log: logger.child({ part: 'store' }), poolSize: settings.poolSize,
    fence: () => lease.fence(), onFenced: (error) => loseLease(error.message),
  });
  let stopped = false;
  const orchestrator = await Orchestrator.create({
    config, logger, store, rootKey,
    orchestrators: () => lease.orchestrators(3 * settings.leaseMs),
    afterClose: async () => {
      stopped = true;
      await lease.release().catch(() => {});
      await pool.end().catch(() => {});
    },
  });
  await orchestrator.listen();
  await lease.heartbeat('active').catch(() => {});
  // Renewed every third of the lease; a renewal that fails (the database away) is tried again every 100 ms, so once
  // the database is back the holder renews well before a standby may take the lease over (half a lease after it saw
  // it run out).
  void (async () => {
    let failing = false;
    while (!stopped && !lost) {
      try {
        if (!(await lease.renew())) return loseLease('another orchestrator took the lease over');
        if (failing) log.info('renewed the mesh lease again');
        failing = false;
        await lease.heartbeat('active');
        await sleep(settings.leaseMs / 3);
      } catch (error) {
        if (!failing) log.warn({ err: error }, 'could not renew the mesh lease (PostgreSQL does not answer); trying every 100 ms, writes wait, fenced by the lease');
        failing = true;
        await sleep(100);
      }
    }
  })();
  return orchestrator;
}
