import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';

/**
 * The line `gpumesh grant create --agent` prints, run as printed on a "bare host": an empty folder with a HOME of its
 * own, no gpumesh on the PATH and none of the npm or gpumesh variables of the shell the tests run in — only Node and
 * npx. npm reaches its registry and uses this machine's npm cache, as a host that installed anything before would;
 * the cache makes the install a cache hit (the registry is still asked for metadata), which keeps each join to
 * 15-35 s from the line to the host in the mesh on a shared 2-core machine — most of it npx unpacking
 * onnxruntime-node, sharp, ffmpeg and the rest — and the file to 45-65 s. Each run's install (npx's folder for that
 * URL or file, a few hundred MB) is removed afterwards; the npm cache keeps the run's 600 KB tarball entry.
 */

const started: { stop(): Promise<void> }[] = [];
afterAll(async () => {
  for (const thing of started.reverse()) await thing.stop();
});

/** The npm cache of this machine (npx's installs land in its _npx folder; the test removes the one it made). */
function npmCache(): string {
  if (process.env.npm_config_cache) return process.env.npm_config_cache;
  try {
    return execFileSync('npm', ['config', 'get', 'cache'], { encoding: 'utf8' }).trim();
  } catch {
    return join(homedir(), '.npm');
  }
}

/** A bare host's environment: this one without npm's, gpumesh's and Node's own settings. */
function bareEnv(home: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (/^(npm_|GPUMESH_|NODE_OPTIONS$|NODE_EXTRA_CA_CERTS$|INIT_CWD$|VITEST)/i.test(key)) continue;
    env[key] = value;
  }
  return { ...env, HOME: home, USERPROFILE: home, npm_config_cache: npmCache(), npm_config_update_notifier: 'false', ...extra };
}

async function serve(data: string, args: string[] = []): Promise<{ proc: Proc; url: string; admin: string }> {
  const proc = gpumesh(['serve', '--data', data, '--port', '0', ...args]);
  started.push({ stop: () => proc.kill() });
  const urlFile = join(data, 'orchestrator.url');
  const grantFile = join(data, 'admin.grant');
  await waitFor(() => {
    if (proc.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${proc.output()}`);
    return existsSync(urlFile) && existsSync(grantFile);
  }, { timeoutMs: 30_000, what: 'gpumesh serve to listen' });
  return { proc, url: readFileSync(urlFile, 'utf8').trim(), admin: readFileSync(grantFile, 'utf8').trim() };
}

/** The join line as `grant create --agent` prints it on stderr (the line after the comment). */
async function printedJoinLine(url: string, admin: string, host: string): Promise<{ line: string; grant: string; installed: string }> {
  const minted = await gpumeshRun(['grant', 'create', '--agent', '--host', host, '--classes', 'image'], { GPUMESH_URL: url, GPUMESH_GRANT: admin });
  expect(minted.code, minted.output).toBe(0);
  const lines = minted.output.split('\n');
  const line = lines.find((text) => text.includes('npx --yes '));
  const installed = lines.find((text) => text.startsWith('gpumesh agent --join '));
  expect(line, minted.output).toBeDefined();
  return { line: line!, grant: minted.stdout.trim(), installed: installed! };
}

/** The npx folder (in the npm cache) whose install is the package at this URL or file. */
function npxFolderOf(spec: string): string | null {
  const root = join(npmCache(), '_npx');
  if (!existsSync(root)) return null;
  for (const entry of readdirSync(root)) {
    try {
      const manifest = readFileSync(join(root, entry, 'package.json'), 'utf8');
      if (manifest.includes(spec)) return join(root, entry);
    } catch {
      // another npx install, in progress or half gone
    }
  }
  return null;
}

/**
 * Run the printed line on a bare host, wait for the host to join, have it run a job, and check what npx installed:
 * the package in npx's folder (not the folder the line ran in), without onnxruntime-node's CUDA download.
 * Returns the seconds from the line to the host in the mesh.
 */
async function joinAsPrinted(line: string, mesh: { url: string; admin: string }, id: string, npxSpec: (hostDir: string) => string): Promise<number> {
  const host = tempDir('gpumesh-bare-host-');
  mkdirSync(join(host, 'home'));
  mkdirSync(join(host, 'work'));
  const began = Date.now();
  const shell: ChildProcess = spawn('sh', ['-c', line], { cwd: join(host, 'work'), env: bareEnv(join(host, 'home')), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let output = '';
  shell.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  shell.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  started.push({
    stop: async () => {
      // npx, npm and the agent are the shell's process group: SIGTERM drains the agent.
      if (shell.exitCode === null && shell.signalCode === null) {
        const exited = once(shell, 'exit');
        process.kill(-shell.pid!, 'SIGTERM');
        await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 15_000))]);
        try { process.kill(-shell.pid!, 'SIGKILL'); } catch { /* gone */ }
      }
      // Each run's URL (its port) or file is new to npx: its install of a few hundred MB goes with the test.
      const npx = npxFolderOf(npxSpec(host));
      if (npx) rmSync(npx, { recursive: true, force: true });
      removeDir(host);
    },
  });

  const client = new MeshClient(mesh.url, mesh.admin);
  await waitFor(async () => {
    if (shell.exitCode !== null) throw new Error(`the join line exited with ${shell.exitCode}:\n${output}`);
    return (await client.request<{ hosts: { id: string }[] }>('GET', '/v1/status')).hosts.some((entry) => entry.id === id);
  }, { timeoutMs: 110_000, intervalMs: 250, what: `the printed line to join host ${id}` });
  const seconds = (Date.now() - began) / 1000;
  console.log(`join-bare: the printed line joined host ${id} in ${seconds.toFixed(1)} s`);

  const job = await client.request<{ id: string }>('POST', '/v1/jobs', { type: 'image', input: { prompt: `made on ${id}`, width: 64, height: 64, steps: 2 } });
  await client.follow(job.id);
  const view = await client.job(job.id);
  expect(view.status).toBe('succeeded');
  expect(view.attempts.map((attempt) => attempt.host)).toEqual([id]);

  const npx = npxFolderOf(npxSpec(host));
  expect(npx, 'the npx folder of the install').not.toBeNull();
  expect(existsSync(join(npx!, 'node_modules', 'gpumesh', 'bin', 'gpumesh.js'))).toBe(true);
  const ortBin = join(npx!, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6', process.platform, process.arch);
  expect(readdirSync(ortBin).filter((file) => file.includes('providers_cuda'))).toEqual([]);
  expect(readdirSync(join(host, 'work')).filter((entry) => entry === 'node_modules')).toEqual([]);
  return seconds;
}

/**
 * An npm package that installs as `gpumesh` and, if run, writes its argv (with the grant in it) to `marker`: what a
 * tampered server would serve. Packed by npm itself, so it is a package npx would really install.
 */
function tamperedPackage(dir: string, marker: string): Buffer {
  const source = join(dir, 'package');
  mkdirSync(join(source, 'bin'), { recursive: true });
  writeFileSync(join(source, 'package.json'), JSON.stringify({ name: 'gpumesh', version: '0.0.1', bin: { gpumesh: 'bin/gpumesh.js' } }));
  writeFileSync(join(source, 'bin', 'gpumesh.js'), `#!/usr/bin/env node\nrequire('fs').writeFileSync(${JSON.stringify(marker)}, process.argv.join(' '));\n`, { mode: 0o755 });
  const name = execFileSync('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir], { cwd: source, encoding: 'utf8', env: bareEnv(join(dir, 'package')) }).trim().split('\n').pop()!;
  return readFileSync(join(dir, name));
}

describe('joining a bare machine with the printed line', () => {
  it('the line installs the orchestrator\'s own package with npx in an empty folder, joins, and the host runs a job', { timeout: 150_000 }, async () => {
    const data = tempDir('gpumesh-join-');
    started.push({ stop: async () => removeDir(data) });
    const mesh = await serve(data);
    await waitHealthy(mesh.url);
    const { line, grant, installed } = await printedJoinLine(mesh.url, mesh.admin, 'bare');
    const shape = /^node -e "[^"]+" (\S+) ([0-9a-f]{64}) && npx --yes --ignore-scripts \.\/gpumesh-([0-9a-f]{64})\.tgz agent --join (\S+) --grant (\S+)$/.exec(line);
    expect(shape, line).not.toBeNull();
    const [, url, digest, file, joinUrl, token] = shape!;
    expect([url, joinUrl, token, file]).toEqual([mesh.url, mesh.url, grant, digest]);
    const tarballUrl = `${mesh.url}/install/sha256/${digest}/gpumesh.tgz`;
    expect(installed).toBe(`gpumesh agent --join ${mesh.url} --grant ${grant}`);

    // The URL names the tarball's digest, and the headers say it too.
    const tarball = await fetch(tarballUrl);
    expect(tarball.status).toBe(200);
    const bytes = Buffer.from(await tarball.arrayBuffer());
    const sha256 = createHash('sha256').update(bytes).digest();
    expect(tarballUrl).toBe(`${mesh.url}/install/sha256/${sha256.toString('hex')}/gpumesh.tgz`);
    expect(tarball.headers.get('repr-digest')).toBe(`sha-256=:${sha256.toString('base64')}:`);
    expect(tarball.headers.get('x-gpumesh-integrity')).toBe(`sha512-${createHash('sha512').update(bytes).digest('base64')}`);
    expect(tarball.headers.get('cache-control')).toContain('immutable');
    expect(Buffer.from(await (await fetch(`${mesh.url}/install/gpumesh.tgz`)).arrayBuffer()).equals(bytes)).toBe(true);
    // A line for a build the orchestrator no longer serves is refused, saying what to do.
    const stale = await fetch(`${mesh.url}/install/sha256/${'0'.repeat(64)}/gpumesh.tgz`);
    expect(stale.status).toBe(410);
    expect(((await stale.json()) as { error: { code: string; message: string } }).error)
      .toMatchObject({ code: 'INSTALL_PACKAGE_CHANGED', message: expect.stringContaining('gpumesh grant create --agent') });

    await joinAsPrinted(line, mesh, 'bare', (host) => join(host, 'work', `gpumesh-${digest}.tgz`).slice(1));
  });

  it('the printed line, pointed at a server that serves a tampered package, installs and runs nothing and hands it no grant', { timeout: 60_000 }, async () => {
    const data = tempDir('gpumesh-join-tampered-');
    started.push({ stop: async () => removeDir(data) });
    const mesh = await serve(data);
    const { line, grant } = await printedJoinLine(mesh.url, mesh.admin, 'tampered');
    // A package that would run as `gpumesh` and write down what it was given: the grant, if the line ran it.
    const evil = tempDir('gpumesh-evil-');
    started.push({ stop: async () => removeDir(evil) });
    const marker = join(evil, 'ran.txt');
    const tarball = tamperedPackage(evil, marker);
    const requests: string[] = [];
    const server = createServer((request, response) => {
      requests.push(`${request.method} ${request.url}`);
      response.writeHead(200, { 'content-type': 'application/gzip' }).end(tarball);
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    started.push({ stop: () => new Promise<void>((resolve) => server.close(() => resolve())) });
    const evilUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    // The line as printed, but its URL answered by the tampered server (a proxy in the way, a spoofed name).
    const pointed = line.replaceAll(mesh.url, evilUrl);
    const host = tempDir('gpumesh-bare-tampered-');
    started.push({ stop: async () => removeDir(host) });
    mkdirSync(join(host, 'home'));
    mkdirSync(join(host, 'work'));
    // Not execFileSync: the tampered server answers from this process's event loop.
    const shell = spawn('sh', ['-c', pointed], { cwd: join(host, 'work'), env: bareEnv(join(host, 'home')), stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    shell.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [status] = await once(shell, 'exit') as [number | null];
    const refused = { status, stderr };
    expect(refused.status, stderr).toBe(2);
    expect(refused?.stderr).toMatch(/gpumesh: the package at http:\/\/127\.0\.0\.1:\d+ is not the one the join line names \(HTTP 200, \d+ bytes hashing to [0-9a-f]{64}, not [0-9a-f]{64}\)\. Nothing was installed or run; no grant was sent\./);
    // Asked once for the package by its digest; nothing kept, nothing installed, nothing ran, no grant went anywhere.
    expect(requests).toEqual([expect.stringMatching(/^GET \/install\/sha256\/[0-9a-f]{64}\/gpumesh\.tgz$/)]);
    expect(readdirSync(join(host, 'work'))).toEqual([]);
    expect(existsSync(marker)).toBe(false);
    expect(refused?.stderr).not.toContain(grant);
  });

  it('on a TLS mesh the line fetches the package pinned to the grant\'s CA and its digest, then joins; another CA is refused', { timeout: 150_000 }, async () => {
    const data = tempDir('gpumesh-join-tls-');
    started.push({ stop: async () => removeDir(data) });
    const mesh = await serve(data, ['--tls']);
    const { line, grant } = await printedJoinLine(mesh.url, mesh.admin, 'bare-tls');
    const shape = /^node -e "[^"]+" (\S+) ([0-9a-f]{64}) (sha256:[0-9a-f]{64}) && npx --yes --ignore-scripts \.\/gpumesh-([0-9a-f]{64})\.tgz agent --join (\S+) --grant (\S+)$/.exec(line);
    expect(shape, line).not.toBeNull();
    const [, url, digest, pin, file, joinUrl, token] = shape!;
    expect([url, joinUrl, token, file]).toEqual([mesh.url, mesh.url, grant, digest]);
    expect(url!.startsWith('https://')).toBe(true);
    const { certificateFingerprint } = await import('../../src/tls-client/index.js');
    expect(pin).toBe(certificateFingerprint(readFileSync(join(data, 'tls', 'ca.crt'), 'utf8')));

    // Another fingerprint in the line: exit 2 before anything is fetched with trust, both fingerprints named, nothing kept.
    const check = line.slice(0, line.indexOf(' && '));
    const elsewhere = tempDir('gpumesh-bare-forged-');
    started.push({ stop: async () => removeDir(elsewhere) });
    const forged = check.replace(pin!, `sha256:${'ab'.repeat(32)}`);
    let refused: { status: number; stderr: string } | null = null;
    try {
      execFileSync('sh', ['-c', forged], { cwd: elsewhere, env: bareEnv(elsewhere), stdio: 'pipe' });
    } catch (error) {
      refused = { status: (error as { status: number }).status, stderr: String((error as { stderr: Buffer }).stderr) };
    }
    expect(refused?.status).toBe(2);
    expect(refused?.stderr).toContain(`the server CA is ${pin}, but the join line pins sha256:${'ab'.repeat(32)}`);
    expect(readdirSync(elsewhere)).toEqual([]);

    await joinAsPrinted(line, mesh, 'bare-tls', (host) => join(host, 'work', `gpumesh-${digest}.tgz`).slice(1));
  });
});
