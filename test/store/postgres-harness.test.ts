import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { ROOT, waitFor } from '../helpers/mesh.js';
import { postgresForFile, startPostgres } from '../helpers/postgres.js';
import { isAlive } from '../helpers/procfs.js';

/**
 * The throwaway PostgreSQL cluster the store's tests stand on (test/helpers/postgres.ts): a restart while a client
 * writes loses no acknowledged row, a crash loses no checkpointed one, clusters started together never share a port
 * or a folder, and none is left behind by a test process that ends, however it ends.
 */
const cluster = postgresForFile();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the PostgreSQL test harness', () => {
  it('restart({ downMs }) stops the server and brings it back on the same port and data, under a client that retries', async () => {
    await cluster().query('CREATE TABLE written (n int PRIMARY KEY)');
    // One writer, one row at a time; a row is acknowledged once its INSERT returned. A failed one is tried again on a
    // new connection (ON CONFLICT: its COMMIT may have landed before the connection went).
    const acknowledged: number[] = [];
    const failedAt: number[] = [];
    let writing = true;
    const writer = (async () => {
      let client: pg.Client | undefined;
      for (let n = 1; writing;) {
        try {
          if (!client) {
            client = new pg.Client({ connectionString: cluster().url });
            client.on('error', () => {}); // the server going away; the next query fails and is tried again
            await client.connect();
          }
          await client.query('INSERT INTO written VALUES ($1) ON CONFLICT DO NOTHING', [n]);
          acknowledged.push(n++);
        } catch {
          failedAt.push(Date.now());
          void client?.end().catch(() => {});
          client = undefined;
          await sleep(25);
        }
      }
      await client?.end();
    })();
    await waitFor(() => acknowledged.length >= 20, { what: 'rows before the restart' });
    const before = acknowledged.length;
    const downFrom = Date.now();
    await cluster().restart({ downMs: 300 });
    await waitFor(() => acknowledged.length >= before + 20, { what: 'rows after the restart' });
    writing = false;
    await writer;
    // The writer saw the server away (its writes refused) for at least the 300 ms asked for.
    expect(failedAt.length).toBeGreaterThan(0);
    expect(failedAt.at(-1)! - Math.min(...failedAt.filter((at) => at >= downFrom))).toBeGreaterThanOrEqual(250);
    const rows = await cluster().query<{ n: number }>('SELECT n FROM written ORDER BY n');
    expect(rows.map((row) => row.n)).toEqual(acknowledged);
    expect(cluster().url).toContain(`:${cluster().port}/`);
  });

  it('kill() crashes the postmaster and start() recovers it; checkpointed rows survive', async () => {
    await cluster().query('CREATE TABLE crashed (n int)');
    await cluster().query('INSERT INTO crashed SELECT generate_series(1, 100)');
    // synchronous_commit=off: COMMIT returns before its WAL leaves shared memory (the WAL writer writes it within
    // ~200 ms), and SIGKILL loses shared memory, so an acknowledged commit may be gone after a crash. CHECKPOINT writes
    // the WAL out first. (fsync=off would only matter if the machine crashed: the page cache outlives the process.)
    await cluster().query('CHECKPOINT');
    await cluster().kill();
    await expect(cluster().query('SELECT 1')).rejects.toThrow();
    await cluster().start();
    expect(await cluster().query('SELECT count(*)::int AS count FROM crashed')).toEqual([{ count: 100 }]);
    // A crash, recovered from: not a clean shutdown.
    expect(readFileSync(join(cluster().dir, 'log'), 'utf8')).toMatch(/not properly shut down; automatic recovery in progress/);
  });

  it('clusters started at once get their own port and folder; stop() ends the server and deletes its folder', async () => {
    const [one, two] = await Promise.all([startPostgres(), startPostgres({ database: 'other' })]);
    try {
      expect(one.port).not.toBe(two.port);
      expect(one.dir).not.toBe(two.dir);
      expect(two.url).toBe(`postgres://gpumesh@127.0.0.1:${two.port}/other`);
      await one.query('CREATE TABLE only_here (n int)');
      expect(await two.query("SELECT to_regclass('only_here') AS found")).toEqual([{ found: null }]);
      expect(await two.query('SELECT current_database() AS name')).toEqual([{ name: 'other' }]);
      const url = await two.createDatabase('third');
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      expect((await client.query('SELECT current_database() AS name')).rows).toEqual([{ name: 'third' }]);
      await client.end();
    } finally {
      await Promise.all([one.stop(), two.stop()]);
    }
    expect(existsSync(one.dir)).toBe(false);
    expect(existsSync(two.dir)).toBe(false);
    await expect(one.query('SELECT 1')).rejects.toThrow();
  });

  it('a process that ends without stop(), by exit or by SIGKILL, leaves no server and no folder behind', async () => {
    const abandon = async (end: 'exit' | 'SIGKILL'): Promise<{ dir: string; pid: number }> => {
      const code = [
        "import { readFileSync } from 'node:fs';",
        `import { startPostgres } from ${JSON.stringify(join(ROOT, 'test/helpers/postgres.ts'))};`,
        'const cluster = await startPostgres();',
        "const pid = Number(readFileSync(cluster.dir + '/data/postmaster.pid', 'utf8').split('\\n')[0]);",
        'console.log(JSON.stringify({ dir: cluster.dir, pid }));',
        end === 'SIGKILL' ? "process.kill(process.pid, 'SIGKILL');" : '',
      ].join('\n');
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const [exitCode, signal] = await once(child, 'exit');
      expect({ exitCode, signal }, output).toEqual(end === 'exit' ? { exitCode: 0, signal: null } : { exitCode: null, signal: 'SIGKILL' });
      return JSON.parse(output) as { dir: string; pid: number };
    };
    // 'exit': the process's exit handler; SIGKILL (as vitest's workers end): the watchdog shell.
    for (const { dir, pid } of await Promise.all([abandon('exit'), abandon('SIGKILL')])) {
      await waitFor(() => !isAlive(pid) && !existsSync(dir), { timeoutMs: 10_000, what: `postmaster ${pid} to end and ${dir} to go` });
    }
  });
});
