import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';

// `gpumesh serve` on another port and data folder than the defaults, as `npm start -- --port N --data ./data` is:
// the CLI finds it from the data folder alone, and when it cannot reach a mesh it says what it tried and what to do.
const data = tempDir();
const elsewhere = tempDir();
let serve: Proc;
let url: string;

beforeAll(async () => {
  serve = gpumesh(['serve', '--data', data, '--port', '0']);
  const file = join(data, 'listen.json');
  await waitFor(() => {
    if (serve.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${serve.output()}`);
    return existsSync(file) && existsSync(join(data, 'admin.grant'));
  }, { timeoutMs: 60_000, what: 'gpumesh serve to listen' });
  const record = JSON.parse(readFileSync(file, 'utf8')) as { url: string; pid: number };
  url = record.url;
  expect(record.pid).toBe(serve.child.pid);
  await waitHealthy(url);
}, 90_000);

afterAll(async () => {
  await serve?.kill();
  removeDir(data);
  removeDir(elsewhere);
});

describe('the CLI finds its mesh', () => {
  it('from --data or GPUMESH_HOME: the URL the mesh recorded in <data>/listen.json (any port)', async () => {
    const byFlag = await gpumeshRun(['status', '--data', data]);
    expect(byFlag.code, byFlag.output).toBe(0);
    expect(byFlag.stdout).toContain(`mesh at ${url}`);
    const byEnv = await gpumeshRun(['status'], { GPUMESH_HOME: data, GPUMESH_URL: undefined });
    expect(byEnv.code, byEnv.output).toBe(0);
    expect(byEnv.stdout).toContain(`mesh at ${url}`);
    expect(serve.output()).toContain(`GPUMESH_HOME=${data}`);
  }, 60_000);

  it('a connection error names the URL, where it came from, and how to point the CLI elsewhere', async () => {
    const explicit = await gpumeshRun(['status', '--url', 'http://127.0.0.1:1']);
    expect(explicit.code).not.toBe(0);
    expect(explicit.output).toContain('cannot reach the orchestrator at http://127.0.0.1:1 (from --url)');
    expect(explicit.output).toMatch(/--url <its URL>, or --data <its data folder> \(or GPUMESH_HOME=<its data folder>\)/);

    // A folder whose mesh stopped (its process is gone): said so, not silently the default.
    writeFileSync(join(elsewhere, 'listen.json'), JSON.stringify({ url: 'http://127.0.0.1:1', pid: 2 ** 22 + 1, startedAt: '' }));
    const busy = await fetch('http://127.0.0.1:7070/healthz').then(() => true, () => false);
    if (busy) return; // something else listens on the default port here; the message below needs it free
    const stale = await gpumeshRun(['status', '--data', elsewhere], { GPUMESH_URL: undefined });
    expect(stale.code).not.toBe(0);
    expect(stale.output).toContain(`cannot reach the orchestrator at http://127.0.0.1:7070 (from the default: the mesh recorded in ${join(elsewhere, 'listen.json')} (pid ${2 ** 22 + 1}) is not running)`);
  }, 60_000);

  it('gpumesh audit reads the audit log, narrowed by event, actor, grant and time, as a table or JSON', async () => {
    const minted = await gpumeshRun(['grant', 'create', '--data', data, '--types', 'image', '--note', 'audit test']);
    expect(minted.code, minted.output).toBe(0);
    // A request refused for its grant (a client grant may not read the audit log).
    expect((await fetch(`${url}/v1/audit`, { headers: { authorization: `Bearer ${minted.stdout.trim()}` } })).status).toBe(403);

    type Entries = { entries: Array<{ event: string; grantId: string | null; actor: string | null; code: string | null }> };
    const all = JSON.parse((await gpumeshRun(['audit', '--data', data, '--json'])).stdout) as Entries;
    expect(all.entries.map((entry) => entry.event)).toEqual(expect.arrayContaining(['grant:minted', 'request:refused']));
    const refused = JSON.parse((await gpumeshRun(['audit', '--data', data, '--event', 'request:refused', '--since', '1h', '--json'])).stdout) as Entries;
    expect(refused.entries).toEqual([expect.objectContaining({ event: 'request:refused', code: 'GRANT_DENIED' })]);
    // The client grant was minted by the admin grant: that entry's actor.
    const adminId = all.entries.find((entry) => entry.event === 'grant:minted' && entry.grantId === refused.entries[0]!.grantId)!.actor!;
    expect(adminId).toMatch(/\S/);
    const byAdmin = JSON.parse((await gpumeshRun(['audit', '--data', data, '--actor', adminId, '--event', 'grant:minted', '--json'])).stdout) as Entries;
    expect(byAdmin.entries.length).toBeGreaterThanOrEqual(1);
    expect(byAdmin.entries.every((entry) => entry.actor === adminId && entry.event === 'grant:minted')).toBe(true);
    const about = JSON.parse((await gpumeshRun(['audit', '--data', data, '--grant-id', refused.entries[0]!.grantId!, '--json'])).stdout) as Entries;
    expect(about.entries.map((entry) => entry.event).sort()).toEqual(['grant:minted', 'request:refused']);
    expect(JSON.parse((await gpumeshRun(['audit', '--data', data, '--limit', '1', '--json'])).stdout).entries).toHaveLength(1);
    const future = await gpumeshRun(['audit', '--data', data, '--since', '2999-01-01T00:00:00Z']);
    expect(future.stdout).toBe('no audit entries\n');

    const text = await gpumeshRun(['audit', '--data', data, '--limit', '5']);
    expect(text.code, text.output).toBe(0);
    expect(text.stdout.split('\n')[0]).toMatch(/^AT\s+EVENT\s+GRANT\s+ACTOR\s+ROUTE\s+CLIENT\s+CODE\s+DETAIL$/);
    const bad = await gpumeshRun(['audit', '--data', data, '--since', 'yesterday']);
    expect(bad.code).not.toBe(0);
    expect(bad.output).toContain('--since must be a duration such as 90m, 12h or 7d, or a time');
  }, 60_000);

  it('the record goes when the mesh stops', async () => {
    await serve.kill('SIGTERM');
    expect(existsSync(join(data, 'listen.json'))).toBe(false);
  }, 30_000);
});

describe('the data folder when nothing names one', () => {
  it('the platform\'s folder ($XDG_DATA_HOME/gpumesh here), found from any folder; a folder with ./.gpumesh keeps using it', async () => {
    const xdg = tempDir();
    const started = tempDir();
    const other = tempDir();
    const env = { XDG_DATA_HOME: xdg, GPUMESH_HOME: undefined, GPUMESH_URL: undefined };
    const platform = join(xdg, 'gpumesh');
    const mesh = gpumesh(['serve', '--port', '0'], env, started);
    try {
      await waitFor(() => {
        if (mesh.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${mesh.output()}`);
        // Its log line follows listen.json: waited for too, so the assertion below never races it.
        return existsSync(join(platform, 'listen.json')) && existsSync(join(platform, 'admin.grant')) && mesh.output().includes('orchestrator listening');
      }, { timeoutMs: 60_000, what: 'gpumesh serve to listen' });
      expect(existsSync(join(started, '.gpumesh'))).toBe(false);
      expect(mesh.output()).toContain(`"data":"${platform}"`);
      const { url: meshUrl } = JSON.parse(readFileSync(join(platform, 'listen.json'), 'utf8')) as { url: string };
      const found = await gpumeshRun(['status'], env, other);
      expect(found.code, found.output).toBe(0);
      expect(found.stdout).toContain(`mesh at ${meshUrl}`);
      // A folder that has its own ./.gpumesh (a mesh started there before platform folders) is that mesh's.
      // Its admin grant is used, not the platform folder's: one that is no grant is refused by the mesh.
      mkdirSync(join(other, '.gpumesh'));
      writeFileSync(join(other, '.gpumesh', 'admin.grant'), 'not-a-grant');
      const local = await gpumeshRun(['status', '--url', meshUrl], env, other);
      expect(local.code).not.toBe(0);
      expect(local.output).toMatch(/401|grant/i);
      const help = await gpumeshRun(['serve', '--help'], env, other);
      expect(help.stdout.replace(/\s+/g, ' ')).toContain(`default ./.gpumesh where it exists, else ${platform}`);
    } finally {
      await mesh.kill();
      for (const dir of [xdg, started, other]) removeDir(dir);
    }
  }, 90_000);
});
