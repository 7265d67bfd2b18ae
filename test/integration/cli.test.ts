import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeDir, startMesh, tempDir, type RunningMesh } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun } from '../helpers/processes.js';

let mesh: RunningMesh;
let env: NodeJS.ProcessEnv;
const out = tempDir('gpumesh-cli-out-');

beforeAll(async () => {
  mesh = await startMesh();
  env = { GPUMESH_HOME: mesh.data, GPUMESH_URL: mesh.url };
});
afterAll(async () => {
  await mesh?.stop();
  removeDir(mesh.data);
  removeDir(out);
});

describe('gpumesh CLI', () => {
  // Twenty-one CLI processes at once: give them room on a loaded machine.
  it('every command has --help', { timeout: 180_000 }, async () => {
    const commands = [[], ['up'], ['serve'], ['agent'], ['agent', 'drain'], ['submit'], ['status'], ['explain'], ['jobs'], ['jobs', 'list'], ['jobs', 'get'], ['jobs', 'show'], ['jobs', 'cancel'], ['jobs', 'delete-results'], ['blobs'], ['blobs', 'put'], ['blobs', 'rm'],
      ['grant'], ['grant', 'create'], ['grant', 'narrow'], ['grant', 'inspect'], ['grant', 'list'], ['grant', 'revoke'], ['grant', 'gallery'],
      ['models'], ['models', 'build'], ['models', 'add'], ['models', 'ls'], ['models', 'show'], ['models', 'rm'], ['models', 'route'], ['models', 'load'], ['models', 'unload']];
    const results = await Promise.all(commands.map((args) => gpumeshRun([...args, '--help'])));
    results.forEach((result, index) => {
      expect(result.code, commands[index]!.join(' ')).toBe(0);
      expect(result.output).toContain('Usage: gpumesh');
    });
  });

  it('submit --wait shows progress, prints the artifact URL and saves the file', async () => {
    // 256×256 so the job outlives the agent's report delay (agent/batches/batch-reports.ts): a job that ends sooner sends no progress.
    const result = await gpumeshRun(['submit', '--type', 'image', '--prompt', 'a lighthouse at dusk', '--seed', '5', '--size', '256x256', '--steps', '3', '--wait', '--out', out], env);
    expect(result.code, result.output).toBe(0);
    expect(result.output).toMatch(/step 3\/3/);
    const url = /url\s+(\S+)/.exec(result.output)?.[1];
    const file = /file\s+(\S+)/.exec(result.output)?.[1];
    expect(url).toMatch(new RegExp(`^${mesh.url}/v1/blobs/sha256:[0-9a-f]{64}$`));
    expect(file && existsSync(file)).toBe(true);
    expect(file!.startsWith(out)).toBe(true);
  });

  it('status prints hosts, devices with memory, resident models and queues', async () => {
    const result = await gpumeshRun(['status'], env);
    expect(result.code, result.output).toBe(0);
    expect(result.output).toMatch(/HOST\s+CLASSES\s+DEVICE\s+MEMORY/);
    expect(result.output).toMatch(/cpu .*\d+\/\d+\/\d+/);
    expect(result.output).toMatch(/MODEL\s+QUEUED\s+LIMIT\s+REPLICAS\s+WHERE/);
    // The submit above loaded gen on the local agent.
    expect(result.output).toMatch(/gen\s+\d+\s+\d+\s+1\/1 \(min 0, max any\)\s+\S+ \(ready\)/);
    // What the store holds: the built-in models' files and the picture made above, in the data folder's blobs.
    expect(result.output).toMatch(/\nstorage: [\d,]+ blobs, [\d.]+ (KiB|MiB) in \S+\/blobs; finished jobs without results kept 30 days; disk: [\d.]+ (MiB|GiB|TiB) free of [\d.]+ (GiB|TiB)\n/);
  });

  it('grant create, narrow offline and inspect; a narrowed grant is refused naming the caveat', async () => {
    const created = await gpumeshRun(['grant', 'create', '--types', 'image', '--models', 'gen', '--expires', '1h'], env);
    expect(created.code, created.output).toBe(0);
    const grant = created.output.trim();
    // Narrowing needs no orchestrator: point the command at nothing.
    const narrowed = await gpumeshRun(['grant', 'narrow', grant, '--types', 'video', '--expires', '10m'], { GPUMESH_URL: 'http://127.0.0.1:1' });
    expect(narrowed.code, narrowed.output).toBe(0);
    const inspect = await gpumeshRun(['grant', 'inspect', narrowed.output.trim()]);
    const caveats = JSON.parse(inspect.output).caveats as string[];
    expect(caveats.slice(0, 4)).toEqual(['kind client', 'types image', 'models gen', expect.stringMatching(/^time-before /)]);
    expect(caveats).toContain('types video');
    const ok = await gpumeshRun(['submit', '--type', 'image', '--prompt', 'allowed', '--size', '64x64', '--grant', grant], env);
    expect(ok.code, ok.output).toBe(0);
    const refused = await gpumeshRun(['submit', '--type', 'image', '--prompt', 'refused', '--grant', narrowed.output.trim()], env);
    expect(refused.code).toBe(1);
    expect(refused.output).toContain('caveat "types video" failed');
    const agent = await gpumeshRun(['grant', 'create', '--agent', '--host', 'laptop', '--classes', 'image', '--json'], env);
    const minted = JSON.parse(agent.output) as { caveats: string[]; token: string; join: string; joinInstalled: string };
    expect(minted.caveats).toEqual(['kind agent', 'classes image', 'host laptop']);
    // The line for a machine with only Node installs the orchestrator's own package (test/integration/join-bare.test.ts runs it).
    // It checks the package's digest before npx installs it.
    expect(minted.join).toMatch(new RegExp(`^node -e "[^"]+" ${mesh.url} ([0-9a-f]{64}) && npx --yes --ignore-scripts \\./gpumesh-\\1\\.tgz agent --join ${mesh.url} --grant ${minted.token}$`));
    expect(minted.joinInstalled).toBe(`gpumesh agent --join ${mesh.url} --grant ${minted.token}`);
    // Without --json, stdout is the grant alone (for scripts) and the join lines go to stderr, naming --join-url.
    const plain = await gpumeshRun(['grant', 'create', '--agent', '--host', 'laptop', '--join-url', 'http://nas:7070'], env);
    expect(plain.stdout.trim()).not.toContain('\n');
    expect(plain.output).toMatch(new RegExp(`node -e "[^"]+" http://nas:7070 ([0-9a-f]{64}) && npx --yes --ignore-scripts \\./gpumesh-\\1\\.tgz agent --join http://nas:7070 --grant ${plain.stdout.trim()}\n`));
    expect(plain.output).toContain(`gpumesh agent --join http://nas:7070 --grant ${plain.stdout.trim()}`);
  });

  // Several CLI processes one after another: give them room on a loaded machine.
  it('grant list shows what was minted; grant revoke takes an id or the grant itself, and the grant is refused at once', { timeout: 180_000 }, async () => {
    const minted = JSON.parse((await gpumeshRun(['grant', 'create', '--types', 'image', '--note', 'for the cli test', '--json'], env)).output) as { id: string; token: string };
    const list = await gpumeshRun(['grant', 'list'], env);
    expect(list.code, list.output).toBe(0);
    expect(list.output).toMatch(/ID\s+KIND\s+CREATED\s+REVOKED\s+NOTE/);
    expect(list.output).toMatch(new RegExp(`${minted.id}\\s+client\\s+\\S+\\s+-\\s+for the cli test`));
    expect(list.output).toMatch(/gallery page/);
    const revoke = await gpumeshRun(['grant', 'revoke', minted.token], env);
    expect(revoke.code, revoke.output).toBe(0);
    expect(revoke.output).toContain(`revoked ${minted.id} (client, for the cli test)`);
    const refused = await gpumeshRun(['jobs', '--grant', minted.token], env);
    expect(refused.code).toBe(1);
    expect(refused.output).toContain('The grant was revoked');
    const json = JSON.parse((await gpumeshRun(['grant', 'list', '--json'], env)).output) as { id: string; revokedAt: string | null }[];
    expect(json.find((grant) => grant.id === minted.id)?.revokedAt).toEqual(expect.any(String));
    const unknown = await gpumeshRun(['grant', 'revoke', 'nosuchgrant'], env);
    expect(unknown.code).toBe(1);
    expect(unknown.output).toContain('Grant nosuchgrant was not found');
  });

  it('the gallery link of `up` lasts 12 h by default; `grant gallery` prints a new one', { timeout: 180_000 }, async () => {
    const grant = new URL(mesh.galleryUrl).hash.slice('#grant='.length);
    const inspect = await gpumeshRun(['grant', 'inspect', grant]);
    expect(inspect.code, inspect.output).toBe(0);
    const inspected = JSON.parse(inspect.output) as { caveats: string[] };
    const expires = Date.parse(inspected.caveats.find((caveat) => caveat.startsWith('time-before '))!.slice('time-before '.length));
    expect(expires).toBeGreaterThan(Date.now() + 11 * 3_600_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 12 * 3_600_000);
    const link = await gpumeshRun(['grant', 'gallery', '--albums', 'family', '--expires', '90m'], env);
    expect(link.code, link.output).toBe(0);
    const fresh = link.output.trim();
    expect(fresh.startsWith(`${mesh.url}/#grant=`)).toBe(true);
    const caveats = (JSON.parse((await gpumeshRun(['grant', 'inspect', fresh.slice(fresh.indexOf('=') + 1)])).output) as { caveats: string[] }).caveats;
    expect(caveats).toEqual(['kind client', 'types image,video', 'albums family', 'actions jobs:submit,jobs:read,artifacts:read,blobs:read', expect.stringMatching(/^time-before /)]);
    const badTtl = await gpumeshRun(['up', '--gallery-ttl', 'forever', '--data', join(out, 'never-started')]);
    expect(badTtl.code).toBe(1);
    expect(badTtl.output).toContain('--gallery-ttl must be a duration');
  });

  it('`grant mesh` prints a link to the mesh view whose grant may only read the mesh and follow jobs', async () => {
    const link = await gpumeshRun(['grant', 'mesh', '--expires', '2h'], env);
    expect(link.code, link.output).toBe(0);
    const fresh = link.output.trim();
    expect(fresh.startsWith(`${mesh.url}/mesh#grant=`)).toBe(true);
    const caveats = (JSON.parse((await gpumeshRun(['grant', 'inspect', fresh.slice(fresh.indexOf('=') + 1)])).output) as { caveats: string[] }).caveats;
    expect(caveats).toEqual(['kind client', 'actions jobs:read,mesh:read', expect.stringMatching(/^time-before /)]);
    const page = await fetch(new URL(fresh).origin + '/mesh');
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<script type="module" src="/web/mesh.js"></script>');
    const bad = await gpumeshRun(['grant', 'mesh', '--expires', 'forever'], env);
    expect(bad.code).toBe(1);
    expect(bad.output).toContain('--expires must be a duration');
  });

  it('clear errors for bad flags, a missing grant and an unreachable mesh', async () => {
    const size = await gpumeshRun(['submit', '--type', 'image', '--prompt', 'x', '--size', 'big'], env);
    expect(size.code).toBe(1);
    expect(size.output).toContain('--size must look like 256x256');
    const noGrant = await gpumeshRun(['submit', '--type', 'image', '--prompt', 'x'], { GPUMESH_HOME: tempDir(), GPUMESH_URL: mesh.url });
    expect(noGrant.code).toBe(1);
    expect(noGrant.output).toContain('This route needs a grant');
    const down = await gpumeshRun(['status', '--url', 'http://127.0.0.1:1'], env);
    expect(down.code).toBe(1);
    expect(down.output).toContain('cannot reach the orchestrator at http://127.0.0.1:1');
    expect(down.output).not.toContain('    at ');
  });

  it('an agent whose grant names another host is refused and exits 2 with the reason', async () => {
    const minted = await gpumeshRun(['grant', 'create', '--agent', '--host', 'laptop'], env);
    const agent = gpumesh(['agent', '--url', mesh.url, '--host', 'desktop', '--data', join(mesh.data, 'wrong-agent')], { GPUMESH_GRANT: minted.stdout.trim() });
    expect(await agent.exited()).toBe(2);
    expect(agent.output()).toContain('host "desktop" is not "laptop"');
    const noGrant = await gpumeshRun(['agent', '--url', mesh.url], { GPUMESH_GRANT: '' });
    expect(noGrant.code).toBe(1);
    expect(noGrant.output).toContain('the agent needs a join grant');
  });

  it('models add uploads an ONNX file and registers it (read from the file); ls, show, load, unload, route and rm', { timeout: 120_000 }, async () => {
    const { GraphBuilder } = await import('../../src/builtin-models/index.js');
    const { writeFileSync } = await import('node:fs');
    const g = new GraphBuilder('cli_double', 'y = 2x');
    const x = g.input('x', 'float32', ['batch', 3]);
    g.op('Add', [x, x], {}, 'y');
    g.output('y', 'float32', ['batch', 3]);
    const file = join(out, 'double.onnx');
    writeFileSync(file, g.toBytes());
    const added = await gpumeshRun(['models', 'add', file, '--name', 'double', '--batching', 'max=4,delay=1'], env);
    expect(added.code, added.output).toBe(0);
    expect(added.output).toMatch(/added double@1 \(\d+ bytes uploaded, sha256:[0-9a-f]{64}\)/);
    expect(added.output).toContain('inputs:  x FP32 [-1, 3]');
    expect(added.output).toContain('batches of up to 4');
    const again = await gpumeshRun(['models', 'add', file, '--name', 'double'], env);
    expect(again.output).toMatch(/added double@2 \(file already stored/);
    const listed = await gpumeshRun(['models', 'ls'], env);
    expect(listed.output).toMatch(/double\s+1,2\s+newest \(2\)\s+onnx\s+tensor/);
    expect(listed.output).toMatch(/gen\s+1\.0\.0/);
    const routed = await gpumeshRun(['models', 'route', 'double', '--pin', '1'], env);
    expect(routed.output).toContain('double: pinned to 1');
    const loaded = await gpumeshRun(['models', 'load', 'double'], env);
    expect(loaded.code, loaded.output).toBe(0);
    expect(loaded.output).toMatch(/loaded double@1 on \S+: \S+ \d+ → \d+ MB of \d+ MB/);
    const unloaded = await gpumeshRun(['models', 'unload', 'double'], env);
    expect(unloaded.output).toMatch(/unloaded double@1 on \S+/);
    expect((await gpumeshRun(['models', 'rm', 'double@2'], env)).output).toContain('removed double@2');
    const shown = await gpumeshRun(['models', 'show', 'double'], env);
    expect(JSON.parse(shown.output).versions.map((version: { name: string; version: string }) => [version.name, version.version])).toEqual([['double', '1']]);
    const missing = await gpumeshRun(['models', 'add', join(out, 'nothing.onnx'), '--name', 'x'], env);
    expect(missing.code).not.toBe(0);
    expect(missing.output).toContain('no such file or folder');
  });
});
