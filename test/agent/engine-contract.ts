import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cpuDevice } from '../../src/agent/devices.js';
import type { Engine, EngineJob, Progress } from '../../src/agent/engines/engine.js';
import type { Supervisor } from '../../src/agent/supervisor.js';
import type { ModelManifest } from '../../src/protocol/index.js';
import { tempDir } from '../helpers/mesh.js';

export interface ContractFixture {
  engine(): Engine;
  supervisor: Supervisor;
  model(): { manifest: ModelManifest; path: string };
  jobs(n: number): EngineJob[];
  /** Progress steps a run of these jobs reports. */
  steps: number;
}

/** Settles with 'pending' if `promise` has not settled within `ms`. */
const within = <T>(promise: Promise<T>, ms: number): Promise<T | 'pending'> =>
  Promise.race([promise, new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms))]);

/** The contract every engine keeps; each engine's test calls this with its own fixture. */
export function engineContract(name: string, fixture: ContractFixture): void {
  describe(`engine contract: ${name}`, () => {
    it('loads a model and reports the memory it took', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const loaded = await engine.load(manifest, path, cpuDevice(2048));
      expect(loaded.memoryMB).toBeGreaterThan(0);
      expect(loaded.manifest.name).toBe(manifest.name);
      await loaded.unload();
      await engine.close();
    });

    it('runs a batch: one output per job, in order, with real per-step progress', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const loaded = await engine.load(manifest, path, cpuDevice(2048));
      const jobs = fixture.jobs(3);
      const progress: Progress[] = [];
      const { outputs } = await loaded.run(jobs, (step) => progress.push(step));
      expect(outputs.map((output) => output.jobId)).toEqual(jobs.map((job) => job.id));
      expect(outputs.every((output) => output.ok)).toBe(true);
      expect(progress.map((step) => step.step)).toEqual(Array.from({ length: fixture.steps }, (_, i) => i + 1));
      await loaded.unload();
      await engine.close();
    });

    it('its process is gone once the last model is unloaded (scale to zero)', async () => {
      const engine = fixture.engine();
      const before = fixture.supervisor.count;
      const { manifest, path } = fixture.model();
      const loaded = await engine.load(manifest, path, cpuDevice(2048));
      expect(fixture.supervisor.count).toBe(before + 1);
      await loaded.unload();
      expect(fixture.supervisor.count).toBe(before);
    });

    it('a crashed engine process fails the batch with ENGINE_CRASHED instead of hanging', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const loaded = await engine.load(manifest, path, cpuDevice(2048));
      const pids = fixture.supervisor.pids();
      const running = loaded.run(fixture.jobs(1), () => {});
      for (const pid of pids) process.kill(pid, 'SIGKILL');
      await expect(running).rejects.toMatchObject({ code: 'ENGINE_CRASHED' });
      await loaded.unload();
      await engine.close();
    });

    it('reports its process\'s death through `exited`, and the next load starts a fresh process that works', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const others = new Set(fixture.supervisor.pids());
      const first = await engine.load(manifest, path, cpuDevice(2048));
      const pid = fixture.supervisor.pids().find((candidate) => !others.has(candidate));
      process.kill(pid!, 'SIGKILL');
      expect(await first.exited).toMatch(/SIGKILL/);
      const second = await engine.load(manifest, path, cpuDevice(2048));
      expect(fixture.supervisor.pids()).not.toContain(pid);
      const { outputs } = await second.run(fixture.jobs(2), () => {});
      expect(outputs.every((output) => output.ok)).toBe(true);
      await first.unload(); // the dead model's unload must not end the fresh process
      expect(fixture.supervisor.count).toBeGreaterThan(0);
      expect((await second.run(fixture.jobs(1), () => {})).outputs[0]!.ok).toBe(true);
      await second.unload();
      await engine.close();
    });

    it('`exited` does not fire for an unload or a close the agent asked for', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const unloaded = await engine.load(manifest, path, cpuDevice(2048));
      await unloaded.unload();
      const closed = await engine.load(manifest, path, cpuDevice(2048));
      await engine.close();
      expect(await within(unloaded.exited, 300)).toBe('pending');
      expect(await within(closed.exited, 300)).toBe('pending');
    });

    it('verifies what it loads: bytes that do not hash to the digest are refused with INTEGRITY_FAILED', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const dir = tempDir();
      const flipped = join(dir, 'flipped');
      const bytes = readFileSync(path);
      bytes[bytes.length >> 1]! ^= 0x01;
      writeFileSync(flipped, bytes);
      const truncated = join(dir, 'truncated');
      writeFileSync(truncated, readFileSync(path).subarray(0, 100));
      for (const bad of [flipped, truncated, join(dir, 'missing')]) {
        await expect(engine.load(manifest, bad, cpuDevice(2048))).rejects.toMatchObject({ code: 'INTEGRITY_FAILED' });
      }
      const good = join(dir, 'good');
      copyFileSync(path, good);
      const loaded = await engine.load(manifest, good, cpuDevice(2048));
      expect((await loaded.run(fixture.jobs(1), () => {})).outputs[0]!.ok).toBe(true);
      await loaded.unload();
      await engine.close();
    });
  });
}
