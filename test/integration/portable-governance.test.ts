import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, meshForFile, waitFor } from '../helpers/mesh.js';

/**
 * Portable governance (macOS's, and any platform without cgroups or Job Objects), forced on Linux: `gpumesh up
 * --agent-process --governance portable`, its agent a process of its own. An engine's tree — a command with two
 * children — dies with the agent when the agent is SIGKILLed (the lifeline), and a command over its memory limit is
 * stopped with ENGINE_OOM by the agent's own measure (no cgroup enforces it here).
 */
const FIXTURES = join(ROOT, 'test/fixtures/engines');
const running = meshForFile({
  args: ['--agent-process', '--governance', 'portable'],
  config: {
    models: {
      tree: { engine: 'exec', types: ['image'], memoryMB: 16, settings: { command: [process.execPath, join(FIXTURES, 'tree.mjs'), '${OUTPUT_DIR}/pids'], timeoutMs: 120_000 } },
      hog: { engine: 'exec', types: ['image'], memoryMB: 16, retries: 0, settings: { command: [process.execPath, join(FIXTURES, 'memory-hog.mjs')], memoryLimitMB: 96 } },
    },
  },
});

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
};

/** The agent process of this mesh (`gpumesh agent … --data <data>/agent`), from /proc. */
function agentPid(data: string): number | null {
  for (const entry of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv.includes('agent') && argv.includes(join(data, 'agent'))) return Number(entry);
    } catch { /* gone */ }
  }
  return null;
}

describe('portable governance, forced on Linux', () => {
  it('the host says how it governs: linux · portable', async () => {
    const { hosts } = await running().client().request<{ hosts: { platform: string; governance: string }[] }>('GET', '/v1/hosts');
    expect(hosts[0]).toMatchObject({ platform: 'linux', governance: 'portable' });
  });

  it('SIGKILL the agent mid-job: every process of the engine\'s tree is gone within seconds', async () => {
    const mesh = running();
    const { id } = await mesh.client().submit({ type: 'image', model: 'tree', input: { prompt: 'grow' } });
    const scratch = '/tmp';
    // The command writes its tree's pids into its own output folder (under the exec scratch in the temp folder).
    const pidsFile = await waitFor(() => {
      for (const entry of readdirSync(scratch).filter((name) => name.startsWith('gpumesh-exec-'))) {
        const file = join(scratch, entry, 'out', 'pids');
        if (existsSync(file) && readFileSync(file, 'utf8').split('\n').length === 3) return file;
      }
      return null;
    }, { timeoutMs: 30_000, what: 'the tree command to write its pids' });
    const tree = readFileSync(pidsFile, 'utf8').split('\n').map(Number);
    expect(tree.every(alive)).toBe(true);
    const agent = agentPid(mesh.data);
    expect(agent).not.toBeNull();
    process.kill(agent!, 'SIGKILL');
    await waitFor(() => tree.every((pid) => !alive(pid)), { timeoutMs: 5000, what: `the tree ${tree.join(', ')} to die with its agent` });
    // It would run again on the agent `up` starts in its place, for ever: cancelled.
    await mesh.client().request('DELETE', `/v1/jobs/${id}`);
  });

  it('a command over its memory limit is stopped by the agent\'s own measure, with ENGINE_OOM naming the limit', async () => {
    const client = running().client();
    // `up` restarted its agent after the kill above: wait for it.
    await waitFor(async () => (await client.request<{ hosts: { connected: boolean }[] }>('GET', '/v1/hosts')).hosts.some((host) => host.connected), { timeoutMs: 30_000, what: 'the agent back' });
    const { id } = await client.submit({ type: 'image', model: 'hog', input: { prompt: 'more' } });
    const end = await client.follow(id);
    expect(end.type).toBe('failed');
    const view = await client.job(id);
    expect(view.error).toMatchObject({ code: 'ENGINE_OOM', message: expect.stringMatching(/stopped for holding more than its memory limit of 96 MB \(\d+ MB, measured by the agent\)/) });
  });
});
