import { execFileSync, spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import pg from 'pg';
import { freePort } from './processes.js';

/**
 * A throwaway PostgreSQL cluster for tests and benchmarks: Debian's `postgresql` binaries, `initdb` into a temp
 * folder, a free port on 127.0.0.1, no system service. As root the cluster belongs to the `postgres` user (initdb
 * refuses root). Settings trade durability for speed (fsync off): a killed server may lose its last commits, so a
 * test of a crash checkpoints first. Each call makes its own cluster, so parallel test files never share one; every
 * cluster still running is stopped when the process exits. Starting one takes about a second and a half here.
 */
export interface RunningPostgres {
  /** postgres://gpumesh@127.0.0.1:<port>/gpumesh */
  url: string;
  port: number;
  dir: string;
  /** A fresh database on the cluster; its URL. */
  createDatabase(name: string): Promise<string>;
  /** Rows of one query on the default database (a one-off connection). */
  query<T = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<T[]>;
  /** Stop the server (fast shutdown), wait `downMs`, start it again on the same port and data. */
  restart(options?: { downMs?: number }): Promise<void>;
  /** SIGKILL the postmaster (a crash). */
  kill(): Promise<void>;
  /** Start it again after `kill` or a stop. */
  start(): Promise<void>;
  /** Stop it and delete its files. */
  stop(): Promise<void>;
}

/** The newest installed PostgreSQL's binaries. */
function binaries(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((entry) => existsSync(join(root, entry, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a)) : [];
  if (versions.length === 0) {
    throw new Error('PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): run `npm run setup-tests`, which installs Debian\'s postgresql');
  }
  return join(root, versions[0]!, 'bin');
}

const asRoot = process.getuid?.() === 0;
const running = new Set<string>();

/** Run a PostgreSQL program as the cluster's owner (the `postgres` user when we are root). */
function run(program: string, args: string[]): void {
  const command = asRoot ? ['runuser', ['-u', 'postgres', '--', program, ...args]] as const : [program, args] as const;
  const result = spawnSync(command[0], [...command[1]], { encoding: 'utf8', timeout: 60_000 });
  if (result.status !== 0) throw new Error(`${program} ${args.join(' ')} failed (${result.status}): ${result.stderr || result.stdout}`);
}

function postmasterPid(data: string): number | null {
  try {
    return Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return null;
  }
}

process.on('exit', () => {
  for (const data of running) {
    const pid = postmasterPid(data);
    if (pid) try { process.kill(pid, 'SIGQUIT'); } catch { /* gone already */ }
  }
});

export async function startPostgres(options: {
  database?: string;
  /** Another address to listen on besides 127.0.0.1 (a network namespace's), and the network allowed from it (CIDR). */
  also?: { listen: string; allow: string };
} = {}): Promise<RunningPostgres> {
  const bin = binaries();
  const dir = mkdtempSync(join(tmpdir(), 'gpumesh-pg-'));
  const data = join(dir, 'data');
  const socket = join(dir, 'socket');
  execFileSync('mkdir', ['-p', data, socket]);
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    for (const path of [dir, data, socket]) chownSync(path, uid, gid);
  }
  chmodSync(dir, 0o755);
  run(join(bin, 'initdb'), ['-D', data, '--auth=trust', '--username=gpumesh', '--encoding=UTF8', '--no-sync']);
  if (options.also) appendFileSync(join(data, 'pg_hba.conf'), `host all all ${options.also.allow} trust\n`);
  const port = await freePort();
  const settings = [
    `-p ${port}`, `-k ${socket}`, `-c listen_addresses=127.0.0.1${options.also ? `,${options.also.listen}` : ''}`, '-c fsync=off', '-c synchronous_commit=off',
    '-c full_page_writes=off', '-c max_connections=200', '-c shared_buffers=64MB',
  ].join(' ');
  const start = async (): Promise<void> => {
    run(join(bin, 'pg_ctl'), ['-D', data, '-l', join(dir, 'log'), '-o', settings, '-w', '-t', '30', 'start']);
    running.add(data);
  };
  const stopServer = (mode: 'fast' | 'immediate'): void => {
    run(join(bin, 'pg_ctl'), ['-D', data, '-m', mode, '-w', 'stop']);
    running.delete(data);
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
      stopServer('fast');
      await new Promise((resolve) => setTimeout(resolve, downMs));
      await start();
    },
    async kill() {
      const pid = postmasterPid(data);
      if (pid) process.kill(pid, 'SIGKILL');
      running.delete(data);
      // The postmaster's children notice it is gone and exit; the stale pid file is cleaned up by the next start.
      await new Promise((resolve) => setTimeout(resolve, 300));
    },
    start,
    async stop() {
      if (running.has(data)) stopServer('fast');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One cluster for a test file: started before its tests, stopped after. */
export function postgresForFile(): () => RunningPostgres {
  let cluster: RunningPostgres | undefined;
  beforeAll(async () => {
    cluster = await startPostgres();
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  return () => {
    if (!cluster) throw new Error('the PostgreSQL cluster is not started yet (use it inside a test)');
    return cluster;
  };
}
