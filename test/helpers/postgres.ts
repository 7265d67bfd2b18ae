import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type Socket } from 'node:net';
import { delimiter, join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import pg from 'pg';
import { childrenOf, isAlive } from './procfs.js';

/**
 * A throwaway PostgreSQL cluster for tests and benchmarks: Debian's `postgresql` binaries, `initdb` into a temp
 * folder, a free port on 127.0.0.1, no system service. As root the cluster belongs to the `postgres` user (initdb
 * refuses root). Settings trade durability for speed (fsync and synchronous_commit off): a killed server may lose its
 * last commits, so a test of a crash checkpoints first. Each call makes its own cluster, so parallel test files never
 * share one; every cluster not stopped is shut down and deleted when the process ends, however it ends.
 *
 * Starting one takes about 1.4 s on a 2-core machine (1.0 to 1.5 s over six, idle: initdb 0.9 to 1.2 s, pg_ctl start
 * 0.12 s, the first connection and CREATE DATABASE 0.25 s), two at once 1.2 to 1.55 s; restart 0.23 s plus downMs,
 * kill 0.02 s, start again 0.12 s, stop 0.15 s.
 */
export interface RunningPostgres {
  /** postgres://gpumesh@127.0.0.1:<port>/gpumesh (or the database asked for) */
  url: string;
  port: number;
  /** The temp folder: data/ (the cluster), socket/, log (the server's). */
  dir: string;
  /** A fresh database on the cluster; its URL. */
  createDatabase(name: string): Promise<string>;
  /** Rows of one query on the default database (a one-off connection). */
  query<T = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<T[]>;
  /** Stop the server (fast shutdown), wait `downMs`, start it again on the same port and data. */
  restart(options?: { downMs?: number }): Promise<void>;
  /** SIGKILL the postmaster (a crash); resolves once it and its backends are gone. */
  kill(): Promise<void>;
  /** Start it again after `kill` or a stop. */
  start(): Promise<void>;
  /** Stop it and delete its files. */
  stop(): Promise<void>;
}

const INSTALL = 'run `npm run setup-tests`, which installs Debian\'s postgresql (or `apt-get install postgresql`)';

/** The folder of the newest installed PostgreSQL's initdb and pg_ctl. */
function binaries(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((entry) => existsSync(join(root, entry, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a)) : [];
  if (versions.length > 0) return join(root, versions[0]!, 'bin');
  // Elsewhere (another distribution, Homebrew): where pg_config says, else wherever pg_ctl is on PATH.
  const candidates: string[] = [];
  try {
    candidates.push(execFileSync('pg_config', ['--bindir'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
  } catch { /* no pg_config */ }
  candidates.push(...(process.env.PATH ?? '').split(delimiter).filter(Boolean));
  const found = candidates.find((dir) => existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'pg_ctl')));
  if (found) return found;
  throw new Error(`PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb, nor initdb and pg_ctl from pg_config --bindir or PATH): ${INSTALL}`);
}

const asRoot = process.getuid?.() === 0;

/** The `postgres` user's uid and gid, which own the cluster when we are root. */
function postgresUser(): { uid: number; gid: number } {
  try {
    const id = (flag: string): number => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    throw new Error(`running as root, the cluster must belong to the \`postgres\` user (initdb refuses root), and there is none: ${INSTALL}`);
  }
}

/**
 * Run a PostgreSQL program as the cluster's owner (the `postgres` user when we are root). Not spawnSync: a test's
 * own clients and timers (a store retrying, a lease renewing) must go on while the server stops and starts, as they
 * would against a real one, and clusters started together run their initdb side by side.
 */
async function run(program: string, args: string[]): Promise<void> {
  const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', program, ...args]] : [program, args];
  const child = spawn(file, argv, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  // 'error': it did not run (runuser not on PATH); a signal: it ran past the timeout.
  const ended = await new Promise<string | null>((resolve) => {
    child.once('error', (error) => resolve(error.message));
    child.once('close', (code, signal) => resolve(code === 0 ? null : `${signal ?? code}`));
  });
  if (ended !== null) throw new Error(`${file} ${argv.join(' ')} failed (${ended}): ${output}`);
}

function postmasterPid(data: string): number | null {
  try {
    return Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]) || null;
  } catch {
    return null;
  }
}

// What this module needs of mesh.ts and processes.ts is here instead: they load src/, which costs a process that
// only wants a database 0.3 s, and would fail this harness whenever src/ is broken mid-change.

/** A port nothing listens on right now. */
async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

/** Alive and not a zombie (Linux /proc); elsewhere, whether it can be signalled. */
function alive(pid: number): boolean {
  if (existsSync('/proc/self')) return isAlive(pid);
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Temp folders of the clusters not stopped yet (folder → data folder). */
const clusters = new Map<string, string>();

// A script or bench that ends, or forgets stop(), must not leave servers behind. 'exit' handlers run synchronously, so
// an immediate shutdown is asked for (SIGQUIT) and not waited on; the folder goes at once (a server shutting down
// writes nothing it needs again).
process.on('exit', () => {
  for (const [dir, data] of clusters) {
    const pid = postmasterPid(data);
    if (pid && alive(pid)) try { process.kill(pid, 'SIGQUIT'); } catch { /* gone already */ }
    rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * The same for a process killed by a signal, which runs no 'exit' handler: vitest ends its workers with SIGTERM (then
 * SIGKILL), so under vitest this is the only cleanup there is. A shell in a process group of its own waits on a pipe
 * from us; the pipe closes however we die, and it stops the server and deletes the folder. stop() ends it first.
 */
function watchdog(dir: string, data: string): ChildProcess {
  const script = 'read _; pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null) && kill -QUIT "$pid" 2>/dev/null; sleep 0.5; rm -rf "$2"';
  const child = spawn('sh', ['-c', script, 'gpumesh-pg-watchdog', data, dir], { detached: true, stdio: ['pipe', 'ignore', 'ignore'] });
  child.unref();
  (child.stdin as Socket).unref(); // it must not keep us alive either
  return child;
}

export async function startPostgres(options: {
  /** The database `url` names, created at start; default `gpumesh`. */
  database?: string;
  /** Another address to listen on besides 127.0.0.1 (a network namespace's), and the network allowed from it (CIDR). */
  also?: { listen: string; allow: string };
} = {}): Promise<RunningPostgres> {
  const bin = binaries();
  const owner = asRoot ? postgresUser() : null;
  const dir = mkdtempSync(join(tmpdir(), 'gpumesh-pg-'));
  const data = join(dir, 'data');
  const socket = join(dir, 'socket');
  clusters.set(dir, data);
  const guard = watchdog(dir, data);
  mkdirSync(data);
  mkdirSync(socket);
  if (owner) for (const path of [dir, data, socket]) chownSync(path, owner.uid, owner.gid);
  chmodSync(dir, 0o755);
  await run(join(bin, 'initdb'), ['-D', data, '--auth=trust', '--username=gpumesh', '--encoding=UTF8', '--no-sync']);
  if (options.also) appendFileSync(join(data, 'pg_hba.conf'), `host all all ${options.also.allow} trust\n`);
  const port = await freePort();
  const settings = [
    `-p ${port}`, `-k ${socket}`, `-c listen_addresses=127.0.0.1${options.also ? `,${options.also.listen}` : ''}`, '-c fsync=off', '-c synchronous_commit=off',
    '-c full_page_writes=off', '-c max_connections=200', '-c shared_buffers=64MB',
  ].join(' ');
  const log = join(dir, 'log');
  const start = async (): Promise<void> => {
    try {
      await run(join(bin, 'pg_ctl'), ['-D', data, '-l', log, '-o', settings, '-w', '-t', '30', 'start']);
    } catch (error) {
      // pg_ctl says only "examine the log output", and the log goes with the folder when the process exits.
      const tail = existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n').slice(-10).join('\n') : '(no log)';
      throw new Error(`${(error as Error).message}\nthe server's log ends:\n${tail}`);
    }
  };
  const stopServer = async (): Promise<void> => {
    // A server that died (killed, or crashed on its own) has nothing to stop; pg_ctl would fail on its stale pid.
    const pid = postmasterPid(data);
    if (pid && alive(pid)) await run(join(bin, 'pg_ctl'), ['-D', data, '-m', 'fast', '-w', 'stop']);
  };
  await start();
  const base = `postgres://gpumesh@127.0.0.1:${port}`;
  const query = async <T>(sql: string, params: unknown[] = [], database = options.database ?? 'gpumesh'): Promise<T[]> => {
    const client = new pg.Client({ connectionString: `${base}/${database}` });
    await client.connect();
    try {
      return (await client.query(sql, params)).rows as T[];
    } finally {
      await client.end();
    }
  };
  const createDatabase = async (name: string): Promise<string> => {
    await query(`CREATE DATABASE ${name}`, [], 'postgres');
    return `${base}/${name}`;
  };
  const url = await createDatabase(options.database ?? 'gpumesh');
  return {
    url, port, dir, createDatabase,
    query: (sql, params) => query(sql, params),
    async restart({ downMs = 0 } = {}) {
      await stopServer();
      await new Promise((resolve) => setTimeout(resolve, downMs));
      await start();
    },
    async kill() {
      const pid = postmasterPid(data);
      if (!pid || !alive(pid)) return;
      // Its backends, listed before they are orphaned: they exit on their own once the postmaster is gone.
      const backends = existsSync('/proc/self') ? childrenOf(pid).map((child) => child.pid) : [];
      process.kill(pid, 'SIGKILL');
      for (const deadline = Date.now() + 10_000; [pid, ...backends].some(alive);) {
        if (Date.now() > deadline) throw new Error(`postmaster ${pid} or its backends still alive 10 s after SIGKILL`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      // A killed postmaster leaves its lock files (postmaster.pid, the socket's .lock), and a new one refuses to start
      // while the pid in them can be signalled, which a zombie can: pg_ctl orphaned the postmaster, so PID 1 reaps it,
      // and a VM's init here took 1.3 s (a container's PID 1 that never reaps, never). It and its backends are gone
      // (out of shared memory too), so the files guard nothing now.
      for (const lock of [join(data, 'postmaster.pid'), join(socket, `.s.PGSQL.${port}.lock`)]) rmSync(lock, { force: true });
    },
    start,
    async stop() {
      await stopServer();
      rmSync(dir, { recursive: true, force: true });
      clusters.delete(dir);
      guard.kill();
    },
  };
}

/** One cluster for a test file: started before its tests, stopped after. */
export function postgresForFile(options: Parameters<typeof startPostgres>[0] = {}): () => RunningPostgres {
  let cluster: RunningPostgres | undefined;
  beforeAll(async () => {
    cluster = await startPostgres(options);
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  return () => {
    if (!cluster) throw new Error('the PostgreSQL cluster is not started yet (use it inside a test)');
    return cluster;
  };
}
