import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { systemClock, workClock, type Clock } from '../../protocol/clock.js';
import type { MeshConfig, PostgresStoreSettings } from '../config/config.js';
import { Orchestrator } from '../orchestrator.js';
import { secretFile } from '../secret-file.js';
import { newId } from '../store/ids.js';
import type { MeshLease } from '../store/index.js';
import { openMeshLease, PostgresStore } from '../store/postgres/index.js';
import { VERSION } from '../../version.js';
import { keepLease, waitForLease, type LeaseTiming } from './lease-keeper.js';
import { StandbyServer } from './standby-server.js';

export interface SharedMeshOptions {
  config: MeshConfig;
  logger: Logger;
  /** This orchestrator lost the mesh lease while it ran the mesh: it must stop at once (the CLI exits; a supervisor restarts it as a standby). */
  onLeaseLost(reason: string): void;
  /** This orchestrator's time: the lease's tries and renewals, and the orchestrator's own. Default: systemClock. */
  clock?: Clock;
}

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
  const clock = options.clock ?? systemClock;
  const settings = config.store as PostgresStoreSettings;
  const log = logger.child({ part: 'lease' });
  const standby = await StandbyServer.listen({
    host: config.server.host, port: config.server.port, retryAfterS: Math.ceil(settings.leaseMs / 1000), active: () => ({ url: activeUrl }),
  });
  let activeUrl: string | null = null;
  config.server.port = standby.port;
  // What the others and the clients a standby turns away are told: publicUrl, else this host by name when it listens
  // on every address (0.0.0.0 is nobody's address), else the address it listens on.
  const everywhere = config.server.host === '0.0.0.0' || config.server.host === '::';
  const url = config.server.publicUrl ?? `${config.server.tls.enabled ? 'https' : 'http'}://${everywhere ? hostname() : config.server.host}:${standby.port}`;
  let lease: MeshLease;
  try {
    lease = await openMeshLease({ databaseUrl: settings.url, log, clock, id: newId('o', clock), url, version: VERSION, ttlMs: settings.leaseMs });
  } catch (error) {
    await standby.close();
    throw error;
  }
  const timing: LeaseTiming = { lease, clock, ttlMs: settings.leaseMs, log };
  await waitForLease(timing, { url, onActive: (active) => (activeUrl = active) });
  await standby.close();

  // Ended when the orchestrator stops or loses the lease: the renewals stop with it.
  const running = new AbortController();
  const loseLease = (reason: string): void => {
    if (running.signal.aborted) return;
    running.abort();
    log.fatal({ orchestrator: lease.id, reason }, 'this orchestrator lost the mesh lease: it stops');
    options.onLeaseLost(reason);
  };
  const localKey = secretFile(join(config.data, 'secret.key'), () => randomBytes(32).toString('base64'));
  const rootKey = Buffer.from(await lease.sharedSecret(localKey), 'base64');
  const store = await PostgresStore.open({
    url: settings.url, log: logger.child({ part: 'store' }), poolSize: settings.poolSize,
    // Writes waiting for the database are work in progress: their retries keep the process alive (workClock).
    clock: workClock,
    fence: () => lease.fence(), onFenced: (error) => loseLease(error.message),
  });
  const orchestrator = await Orchestrator.create({
    config, logger, clock, store, rootKey,
    orchestrators: () => lease.orchestrators(3 * settings.leaseMs),
    afterClose: async () => {
      running.abort();
      await lease.release().catch(() => {});
      await lease.close().catch(() => {});
    },
  });
  await orchestrator.listen();
  await lease.heartbeat('active').catch(() => {});
  void keepLease(timing, running.signal, loseLease);
  return orchestrator;
}
