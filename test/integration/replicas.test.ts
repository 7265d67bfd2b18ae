import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import type { JobView, MeshEvent } from '../../src/protocol/api/index.js';
import { BIN, removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';

/**
 * Replicas across real hosts: `gpumesh serve` and several `gpumesh agent --join …` processes, each with its own
 * host id, data folder and a small CPU budget, over the real WebSocket link, running the built-in ONNX model.
 */

interface Status {
  hosts: { id: string; draining: boolean }[];
  models: Record<string, { desired: number; replicas: { host: string; state: string; held: boolean }[] }>;
}

const started: { stop(): Promise<void> }[] = [];
afterAll(async () => {
  for (const proc of started.reverse()) await proc.stop();
});

class Mesh {
  readonly data = tempDir('gpumesh-replicas-');
  readonly agents = new Map<string, Proc>();
  readonly events: MeshEvent[] = [];
  serve!: Proc;
  url!: string;
  admin!: string;
  #stopEvents = new AbortController();

  static async start(config: Record<string, unknown>): Promise<Mesh> {
    const mesh = new Mesh();
    writeFileSync(join(mesh.data, 'mesh.yaml'), stringify(config));
    mesh.serve = gpumesh(['serve', '--data', mesh.data, '--port', '0']);
    started.push(mesh);
    const urlFile = join(mesh.data, 'orchestrator.url');
    const grantFile = join(mesh.data, 'admin.grant');
    await waitFor(() => {
      if (mesh.serve.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${mesh.serve.output()}`);
      return existsSync(urlFile) && existsSync(grantFile);
    }, { timeoutMs: 30_000, what: 'gpumesh serve to listen' });
    mesh.url = readFileSync(urlFile, 'utf8').trim();
    mesh.admin = readFileSync(grantFile, 'utf8').trim();
    await waitHealthy(mesh.url);
    void mesh.#followEvents();
    return mesh;
  }

  client(): MeshClient {
    return new MeshClient(this.url, this.admin);
  }

  /** Mint a join grant for the host and start its agent with the one-line join. */
  async join(host: string, options: { classes?: string[]; budgetMB: number; concurrency?: number }): Promise<Proc> {
    const { token } = await this.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host, classes: options.classes ?? ['image'] });
    const agent = gpumesh([
      'agent', '--join', this.url, '--grant', token, '--cpu-budget', String(options.budgetMB), '--concurrency', String(options.concurrency ?? 1),
      '--data', join(this.data, 'agents', host),
    ]);
    this.agents.set(host, agent);
    await this.connected(host);
    return agent;
  }

  async connected(host: string): Promise<void> {
    await waitFor(async () => (await this.status()).hosts.some((entry) => entry.id === host), { timeoutMs: 30_000, what: `${host} to join` });
  }

  status(): Promise<Status> {
    return this.client().request<Status>('GET', '/v1/status');
  }

  async replicas(model: string): Promise<{ host: string; state: string; held: boolean }[]> {
    return (await this.status()).models[model]?.replicas ?? [];
  }

  async submitMany(count: number, input: Record<string, unknown>): Promise<string[]> {
    const jobs = Array.from({ length: count }, (_, index) => ({ type: 'image', input: { ...input, prompt: `burst ${index}`, seed: index } }));
    const answer = await this.client().request<{ results: { status: number; id: string }[] }>('POST', '/v1/jobs:batch', { jobs });
    return answer.results.map((result) => result.id);
  }

  async finished(ids: string[]): Promise<JobView[]> {
    const views: JobView[] = [];
    for (const id of ids) {
      await this.client().follow(id);
      views.push(await this.client().job(id));
    }
    return views;
  }

  async stop(): Promise<void> {
    this.#stopEvents.abort();
    for (const agent of this.agents.values()) await agent.kill('SIGKILL');
    await this.serve.kill();
    removeDir(this.data);
  }

  /** The mesh events of /v1/events (SSE), as they come. */
  async #followEvents(): Promise<void> {
    try {
      const response = await fetch(`${this.url}/v1/events`, { headers: { authorization: `Bearer ${this.admin}` }, signal: this.#stopEvents.signal });
      let buffer = '';
      const decoder = new TextDecoder();
      for await (const chunk of response.body!) {
        buffer += decoder.decode(chunk as Uint8Array, { stream: true });
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = /^data: (.*)$/m.exec(frame)?.[1];
          if (data && /^event: \w+:\w+$/m.test(frame)) this.events.push(JSON.parse(data) as MeshEvent);
        }
      }
    } catch {
      // aborted at the end of the test
    }
  }
}

/** The processes a process started (its engine workers), from /proc. */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The command name (field 2) may hold spaces and parentheses; fields after the last ')' are fixed.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) children.push(Number(entry));
    } catch {
      // exited while we looked
    }
  }
  return children;
}

describe('replicas across hosts (real agent processes)', () => {
  it('scales out to several replicas under a burst and back to zero after the idle window; the engine processes end', { timeout: 120_000 }, async () => {
    const mesh = await Mesh.start({ models: { gen: { targetInFlight: 4, maxReplicas: 3, idleWindowS: 2 } }, autoscaler: { intervalMs: 200 } });
    await Promise.all(['a', 'b', 'c'].map((host) => mesh.join(host, { budgetMB: 300 })));
    expect(await mesh.replicas('gen')).toEqual([]);
    for (const agent of mesh.agents.values()) expect(childrenOf(agent.child.pid!)).toEqual([]);

    // 16 jobs, 4 per replica: ⌈16 ÷ 4⌉ = 4, capped at maxReplicas 3.
    const ids = await mesh.submitMany(16, { width: 128, height: 128, steps: 6 });
    // While it runs: how many replicas at most, and which hosts had an engine process while their replica was ready.
    let peak = 0;
    let done = false;
    const hadEngine = new Set<string>();
    const watching = (async () => {
      while (!done) {
        const replicas = await mesh.replicas('gen');
        peak = Math.max(peak, replicas.length);
        for (const replica of replicas.filter((entry) => entry.state === 'ready')) {
          if (childrenOf(mesh.agents.get(replica.host)!.child.pid!).length > 0) hadEngine.add(replica.host);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    const views = await mesh.finished(ids);
    done = true;
    await watching;
    expect(peak).toBe(3);
    expect(views.every((view) => view.status === 'succeeded')).toBe(true);
    const hostsThatRan = new Set(views.map((view) => view.attempts.at(-1)!.host));
    expect(hostsThatRan.size).toBeGreaterThan(1);
    expect([...hadEngine].sort()).toEqual(['a', 'b', 'c']);

    // Traffic stopped: after the 2 s window every replica is unloaded (minReplicas 0) and each engine process ends.
    await waitFor(async () => (await mesh.replicas('gen')).length === 0, { timeoutMs: 20_000, what: 'gen to scale in to zero' });
    expect((await mesh.status()).models.gen!.desired).toBe(0);
    for (const [host, agent] of mesh.agents) {
      await waitFor(() => childrenOf(agent.child.pid!).length === 0, { timeoutMs: 10_000, what: `the engine process on ${host} to end` });
    }
    expect(mesh.serve.output()).toContain('unloading a replica');
  });

  it('a load refused by an agent whose budget is taken is reported, and the autoscaler loads on another host', { timeout: 120_000 }, async () => {
    // mlp is held on `small` (the only tensor host) for its floor; gen (128 MB) fits small's 130 MB budget only if mlp goes.
    const mesh = await Mesh.start({ models: { mlp: { minReplicas: 1 }, gen: { maxReplicas: 1 } }, autoscaler: { intervalMs: 200 } });
    await Promise.all([mesh.join('small', { classes: ['image', 'tensor'], budgetMB: 130 }), mesh.join('big', { budgetMB: 1000 })]);
    await waitFor(async () => (await mesh.replicas('mlp')).some((replica) => replica.host === 'small' && replica.state === 'ready' && replica.held),
      { timeoutMs: 30_000, what: 'mlp to be held on small' });

    // Best fit asks small first (the smallest budget that takes gen); small refuses; big is asked next. The job rode
    // along with small's load, so it fails there the same way (retryably) and succeeds on big.
    const [id] = await mesh.submitMany(1, { width: 64, height: 64, steps: 2 });
    const [view] = await mesh.finished([id!]);
    expect(view!.status).toBe('succeeded');
    expect(view!.attempts.map((attempt) => `${attempt.host} ${attempt.error?.code ?? attempt.status}`)).toEqual(['small NO_ROOM', 'big succeeded']);
    const refused = mesh.events.find((event) => event.type === 'replica:refused');
    expect(refused).toMatchObject({ type: 'replica:refused', host: 'small', model: 'gen', code: 'NO_ROOM' });
    expect(new TextDecoder().decode(await mesh.client().download('/metrics')))
      .toMatch(/gpumesh_replica_load_refusals_total\{host="small",model="gen",code="NO_ROOM"\} 1/);
    expect(mesh.serve.output()).toContain('a host refused to load a replica; trying another');
    expect(await mesh.replicas('gen')).toEqual([{ host: 'big', state: 'ready', held: false }]);
    expect(await mesh.replicas('mlp')).toEqual([{ host: 'small', state: 'ready', held: true }]);

    // An admin drains big through the orchestrator (`gpumesh agent drain --host`): its agent leaves and exits 0.
    const drained = await gpumeshRun(['agent', 'drain', '--host', 'big', '--url', mesh.url, '--grant', mesh.admin]);
    expect(drained.code, drained.output).toBe(0);
    expect(drained.output).toContain('host big is draining');
    expect(await mesh.agents.get('big')!.exited()).toBe(0);
    await waitFor(() => mesh.events.some((event) => event.type === 'host:left' && event.host === 'big'), { what: 'big to leave' });
  });

  it('SIGTERM mid-batch drains a host: its job finishes there, no new job is routed there, the agent exits 0', { timeout: 120_000 }, async () => {
    const mesh = await Mesh.start({ models: { gen: { minReplicas: 2 } }, autoscaler: { intervalMs: 200 } });
    // Two batches at once per host: the draining host has a free slot the whole time, so only draining keeps work away.
    await Promise.all(['d1', 'd2'].map((host) => mesh.join(host, { budgetMB: 1000, concurrency: 2 })));
    await waitFor(async () => (await mesh.replicas('gen')).filter((replica) => replica.state === 'ready' && replica.held).length === 2,
      { timeoutMs: 30_000, what: 'both gen replicas (minReplicas 2)' });

    const [slow] = await mesh.submitMany(1, { width: 512, height: 512, steps: 12 });
    const running = await waitFor(async () => {
      const view = await mesh.client().job(slow!);
      return view.status === 'running' ? view : null;
    }, { timeoutMs: 30_000, what: 'the slow job to run' });
    const draining = running.attempts[0]!.host;
    const survivor = draining === 'd1' ? 'd2' : 'd1';
    mesh.agents.get(draining)!.child.kill('SIGTERM');
    await waitFor(async () => (await mesh.status()).hosts.find((host) => host.id === draining)?.draining, { what: `${draining} to be draining` });

    // Three batches (three sizes): the survivor takes two at once; without the drain the third would go to the
    // draining host's free slot. It waits for the survivor instead.
    const quick = [];
    for (const side of [64, 72, 80]) quick.push(...await mesh.submitMany(1, { width: side, height: side, steps: 2 }));
    const quickViews = await mesh.finished(quick);
    expect(quickViews.map((view) => view.attempts.map((attempt) => attempt.host))).toEqual([[survivor], [survivor], [survivor]]);
    const [slowView] = await mesh.finished([slow!]);
    expect(slowView!.status).toBe('succeeded');
    expect(slowView!.attempts.map((attempt) => `${attempt.host} ${attempt.status}`)).toEqual([`${draining} succeeded`]);
    expect(new Date(slowView!.finishedAt!).getTime()).toBeGreaterThan(Math.min(...quickViews.map((view) => new Date(view.attempts[0]!.dispatchedAt).getTime())));

    expect(await mesh.agents.get(draining)!.exited()).toBe(0);
    await waitFor(() => mesh.events.some((event) => event.type === 'host:left' && event.host === draining), { what: `${draining} to leave` });
    expect(mesh.events.some((event) => event.type === 'host:lost')).toBe(false);
    expect(mesh.events.find((event) => event.type === 'host:draining')).toMatchObject({ host: draining, jobsInFlight: 1 });
    expect((await mesh.status()).hosts.map((host) => host.id)).toEqual([survivor]);
    expect(mesh.agents.get(draining)!.output()).toContain('draining: finishing the work in flight, taking no more');
  });

  it('`models load` without --host makes a model resident on its minReplicas hosts and prints each one\'s memory; --replicas is capped by maxReplicas', { timeout: 120_000 }, async () => {
    const mesh = await Mesh.start({ models: { gen: { minReplicas: 2 }, mlp: { maxReplicas: 1 } }, autoscaler: { intervalMs: 200 } });
    await Promise.all(['m1', 'm2'].map((host) => mesh.join(host, { classes: ['image', 'tensor'], budgetMB: 1000 })));
    const env = { GPUMESH_URL: mesh.url, GPUMESH_GRANT: mesh.admin };
    // Asked at once, while the autoscaler's floor may still be loading: the answer waits until both hold it.
    const loaded = await gpumeshRun(['models', 'load', 'gen'], env);
    expect(loaded.code, loaded.output).toBe(0);
    const lines = loaded.stdout.trim().split('\n');
    expect(lines).toHaveLength(2);
    for (const host of ['m1', 'm2']) expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^loaded gen on ${host}: cpu \\d+ → \\d+ MB of 1000 MB$`)));
    expect((await mesh.replicas('gen')).map((replica) => `${replica.host} ${replica.state} ${replica.held}`).sort()).toEqual(['m1 ready true', 'm2 ready true']);
    const answer = await mesh.client().request<{ model: string; wanted: number; note: string | null; loaded: { host: string; device: string; before: { usedMB: number }[]; after: { usedMB: number }[] }[] }>('POST', '/v1/models/gen/load', {});
    expect(answer).toMatchObject({ model: 'gen', wanted: 2, note: null });
    expect(answer.loaded.map((change) => change.host).sort()).toEqual(['m1', 'm2']);
    for (const change of answer.loaded) {
      expect(change.before).toEqual([expect.objectContaining({ id: 'cpu', usedMB: expect.any(Number), budgetMB: 1000 })]);
      expect(change.after).toEqual([expect.objectContaining({ id: 'cpu', usedMB: expect.any(Number), budgetMB: 1000 })]);
    }

    // mlp: no floor, at most one replica; two asked → one, and the answer says why.
    const capped = await gpumeshRun(['models', 'load', 'mlp', '--replicas', '2'], env);
    expect(capped.code, capped.output).toBe(0);
    expect(capped.stdout).toMatch(/^loaded mlp on m[12]: cpu \d+ → \d+ MB of 1000 MB\n1 replica \(2 asked; maxReplicas is 1\)\n$/);
    const both = await gpumeshRun(['models', 'load', 'mlp', '--replicas', '2', '--host', 'm1'], env);
    expect(both.code).not.toBe(0);
    expect(both.output).toContain('give --host or --replicas, not both');
    const help = await gpumeshRun(['models', 'load', '--help'], env);
    expect(help.stdout).toContain('--replicas <n>');
    expect(help.stdout).toContain('minReplicas');
  });

  it('`models load` with minReplicas 3 and two hosts loads both and says 2 of 3, and why', { timeout: 120_000 }, async () => {
    const mesh = await Mesh.start({ models: { gen: { minReplicas: 3 } }, autoscaler: { intervalMs: 200 } });
    await Promise.all(['n1', 'n2'].map((host) => mesh.join(host, { budgetMB: 1000 })));
    const loaded = await gpumeshRun(['models', 'load', 'gen'], { GPUMESH_URL: mesh.url, GPUMESH_GRANT: mesh.admin });
    expect(loaded.code, loaded.output).toBe(0);
    const lines = loaded.stdout.trim().split('\n');
    expect(lines.slice(0, 2).sort()).toEqual([expect.stringMatching(/^loaded gen on n1: cpu \d+ → \d+ MB of 1000 MB$/), expect.stringMatching(/^loaded gen on n2: /)]);
    expect(lines[2]).toBe('2 of 3 replicas: only 2 hosts can serve it');
    expect((await mesh.replicas('gen')).filter((replica) => replica.state === 'ready')).toHaveLength(2);
  });

  it('the join line `grant create --agent` prints works as printed; `gpumesh agent drain` on the host drains it', { timeout: 120_000 }, async () => {
    const mesh = await Mesh.start({ autoscaler: { intervalMs: 200 } });
    const minted = await gpumeshRun(['grant', 'create', '--agent', '--host', 'joined', '--classes', 'image'], { GPUMESH_URL: mesh.url, GPUMESH_GRANT: mesh.admin });
    expect(minted.code, minted.output).toBe(0);
    const line = minted.output.split('\n').find((text) => text.startsWith('gpumesh agent --join '));
    expect(line).toBe(`gpumesh agent --join ${mesh.url} --grant ${minted.stdout.trim()}`);
    // Run exactly that line, with gpumesh on the PATH, on a "host" whose GPUMESH_HOME is its own folder.
    const bin = join(mesh.data, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'gpumesh'), `#!/bin/sh\nexec "${process.execPath}" "${BIN}" "$@"\n`);
    chmodSync(join(bin, 'gpumesh'), 0o755);
    const home = join(mesh.data, 'joined-home');
    mkdirSync(home);
    const printed = spawn('sh', ['-c', line!], {
      env: { ...process.env, PATH: `${bin}:${process.env.PATH}`, GPUMESH_HOME: home, GPUMESH_URL: '', GPUMESH_GRANT: '' }, stdio: 'ignore',
    });
    const printedExit = once(printed, 'exit').then(([code]) => code as number | null);
    started.push({ stop: async () => { if (printed.exitCode === null) printed.kill('SIGKILL'); } });
    await mesh.connected('joined');
    // Its host id and classes came from the grant; its data folder (and control socket) from GPUMESH_HOME.
    const [id] = await mesh.submitMany(1, { width: 64, height: 64, steps: 2 });
    const [view] = await mesh.finished([id!]);
    expect(view!.attempts.map((attempt) => `${attempt.host} ${attempt.status}`)).toEqual(['joined succeeded']);

    const local = await gpumeshRun(['agent', 'drain'], { GPUMESH_HOME: home });
    expect(local.code, local.output).toBe(0);
    expect(local.output).toContain('the agent finished its work in flight and left the mesh');
    expect(await printedExit).toBe(0);
    await waitFor(() => mesh.events.some((event) => event.type === 'host:left' && event.host === 'joined'), { what: 'joined to leave' });
  });
});
