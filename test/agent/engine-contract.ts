import { describe, expect, it } from 'vitest';
import { cpuDevice } from '../../src/agent/devices.js';
import type { Engine, EngineJob, Progress } from '../../src/agent/engines/engine.js';
import type { Supervisor } from '../../src/agent/supervisor.js';
import type { ModelManifest } from '../../src/protocol/index.js';

export interface ContractFixture {
  engine(): Engine;
  supervisor: Supervisor;
  model(): { manifest: ModelManifest; path: string };
  jobs(n: number): EngineJob[];
  /** Progress steps a run of these jobs reports. */
  steps: number;
}

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
      const outputs = await loaded.run(jobs, (step) => progress.push(step));
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
  });
}
