import { describe, expect, it } from 'vitest';
import { cpuDevice } from '../../src/agent/devices.js';
import type { Engine, EngineJob, JobOutput, LoadedModel, Progress } from '../../src/agent/core/engine.js';
import type { ModelManifest } from '../../src/protocol/index.js';
import { waitFor } from '../helpers/mesh.js';

/**
 * What the contract needs from one adapter engine (ComfyUI, OIP, command).
 * Each adapter's test file builds one against its stand-in or fixture
 * command, so the same checks run against every adapter; it is shaped to fold
 * into the shared engine contract (one factory per engine).
 */
export interface AdapterFixture {
  engine(): Engine;
  model(): { manifest: ModelManifest; path: string };
  jobs(n: number): EngineJob[];
  /** Total progress steps a run of `n` jobs reports. */
  steps(n: number): number;
  /** Check that a job's output is the one its input asks for (a real check of the computation). */
  check(job: EngineJob, output: Extract<JobOutput, { ok: true }>): void | Promise<void>;
  /** Jobs (and, where slowness is the model's, a model) that run long enough to cancel mid-run. */
  slow: { jobs(n: number): EngineJob[]; model?(): { manifest: ModelManifest; path: string } };
  /** A job the engine must fail on its own — a clear, non-retryable job error — while its batch mates succeed. */
  bad: { job(): EngineJob; code: string; message: RegExp };
}

const device = cpuDevice(2048);

async function loadWith(fixture: AdapterFixture, model = fixture.model()): Promise<{ engine: Engine; loaded: LoadedModel }> {
  const engine = fixture.engine();
  const loaded = await engine.load(model.manifest, model.path, device);
  return { engine, loaded };
}

/** The contract every adapter engine keeps, run against real processes. */
export function adapterContract(name: string, fixture: AdapterFixture): void {
  describe(`adapter contract: ${name}`, () => {
    it('loads a model, reports the memory it takes, and unloads (twice is harmless; a run after unload fails)', async () => {
      const { engine, loaded } = await loadWith(fixture);
      expect(loaded.memoryMB).toBeGreaterThan(0);
      expect(loaded.manifest.name).toBe(fixture.model().manifest.name);
      await loaded.unload();
      await loaded.unload();
      await expect(loaded.run(fixture.jobs(1), () => {})).rejects.toThrow(/unloaded/);
      await engine.close();
    });

    it('runs a batch: one output per job, in order, each the right one, with forward-only progress to the end', async () => {
      const { engine, loaded } = await loadWith(fixture);
      const jobs = fixture.jobs(3);
      const progress: Progress[] = [];
      const outputs = (await loaded.run(jobs, (step) => progress.push(step))).outputs;
      expect(outputs.map((output) => output.jobId)).toEqual(jobs.map((job) => job.id));
      for (const [index, output] of outputs.entries()) {
        expect(output, JSON.stringify(output)).toMatchObject({ ok: true });
        await fixture.check(jobs[index]!, output as Extract<JobOutput, { ok: true }>);
      }
      const total = fixture.steps(3);
      expect(progress.map((step) => step.step)).toEqual(Array.from({ length: total }, (_, i) => i + 1));
      expect(progress.at(-1)).toEqual({ step: total, total });
      await loaded.unload();
      await engine.close();
    });

    it('a job it cannot run fails alone, with a clear non-retryable error; its batch mates succeed', async () => {
      const { engine, loaded } = await loadWith(fixture);
      const [first, second] = fixture.jobs(2);
      const bad = fixture.bad.job();
      const outputs = (await loaded.run([first!, bad, second!], () => {})).outputs;
      expect(outputs.map((output) => output.jobId)).toEqual([first!.id, bad.id, second!.id]);
      expect(outputs[0]).toMatchObject({ ok: true });
      expect(outputs[2]).toMatchObject({ ok: true });
      expect(outputs[1]).toMatchObject({ ok: false, code: fixture.bad.code, retryable: false });
      expect((outputs[1] as { message: string }).message).toMatch(fixture.bad.message);
      await loaded.unload();
      await engine.close();
    });

    it('cancelling one job of a running batch ends it CANCELLED; the others still succeed', async () => {
      const { engine, loaded } = await loadWith(fixture, fixture.slow.model?.());
      const jobs = fixture.slow.jobs(2);
      let progressed = false;
      const running = loaded.run(jobs, () => (progressed = true));
      await waitFor(() => progressed, { what: 'the first progress report' });
      loaded.cancel([jobs[1]!.id]);
      const { outputs } = await running;
      expect(outputs.map((output) => output.jobId)).toEqual(jobs.map((job) => job.id));
      expect(outputs[0]).toMatchObject({ ok: true });
      expect(outputs[1]).toMatchObject({ ok: false, code: 'CANCELLED', retryable: false });
      await loaded.unload();
      await engine.close();
    });

    it('cancelling every job ends the run promptly, every job CANCELLED', async () => {
      const { engine, loaded } = await loadWith(fixture, fixture.slow.model?.());
      const jobs = fixture.slow.jobs(2);
      let progressed = false;
      const running = loaded.run(jobs, () => (progressed = true));
      await waitFor(() => progressed, { what: 'the first progress report' });
      const cancelledAt = performance.now();
      loaded.cancel(jobs.map((job) => job.id));
      const { outputs } = await running;
      expect(performance.now() - cancelledAt).toBeLessThan(3000);
      for (const output of outputs) expect(output).toMatchObject({ ok: false, code: 'CANCELLED', retryable: false });
      await loaded.unload();
      await engine.close();
    });
  });
}
