import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cpuDevice } from '../../src/agent/devices.js';
import type { BatchResult, Engine, EngineJob, JobOutput, LoadedModel, Progress } from '../../src/agent/core/engine.js';
import type { ModelManifest } from '../../src/protocol/index.js';
import { tempDir } from '../helpers/mesh.js';

/** Everything the contract needs to run against one engine. */
export interface ContractFixture {
  /** A fresh engine (one per test; the contract closes it). */
  engine(): Engine;
  model(): { manifest: ModelManifest; path: string };
  /** n image jobs the engine runs quickly. */
  jobs(n: number): EngineJob[];
  /** n image jobs that take long enough (a few hundred ms) to be cancelled while they run. */
  slowJobs(n: number): EngineJob[];
  /** A batch the engine must refuse as INVALID_INPUT, in a job's output or by rejecting the run. */
  invalidBatch(): EngineJob[];
  /** What a run of jobs(3) reports: progress rising to `total`; with `everyStep`, every step from 1. */
  progress: { total: number; everyStep: boolean };
  /** Live processes that serve the engine's models (its worker, or the servers its launcher started). */
  processes(): number;
  pids(): number[];
  /** The error code of a run whose processes died under it. */
  crashCode: string;
  /**
   * An engine that measures memory (its own process's resident set, or its server's report) says so; its
   * load figure must then differ from the manifest's guess, and each batch must report a peak.
   */
  measuresMemory: boolean;
  /** An engine that reads the model's bytes itself hashes them while it loads (server engines rely on the model cache). */
  verifiesBytes: boolean;
  /** Whether the engine's own processes can die under a loaded model (and `exited` must say so). */
  ownsProcesses: boolean;
}

/** Settles with 'pending' if `promise` has not settled within `ms`. */
const within = <T>(promise: Promise<T>, ms: number): Promise<T | 'pending'> =>
  Promise.race([promise, new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms))]);

interface Failure {
  code: string;
  message: string;
  retryable: boolean;
}

/** The failures of a run, whichever way the engine reports them: a rejected run (the whole batch), or failed outputs. */
async function failuresOf(run: Promise<BatchResult>): Promise<Failure[]> {
  try {
    const { outputs } = await run;
    return outputs.filter((output) => !output.ok).map((output) => output as Failure);
  } catch (error) {
    const failed = error as Failure;
    return [{ code: failed.code, message: failed.message, retryable: failed.retryable }];
  }
}

const PNG_SIGNATURE = '89504e470d0a1a0a';

/**
 * The contract every engine keeps, run against each through its fixture (the ONNX engine with its
 * worker, the HTTP engines with stand-in servers started by a test launcher).
 */
export function engineContract(name: string, fixture: ContractFixture): void {
  describe(`engine contract: ${name}`, () => {
    async function loaded(engine: Engine): Promise<LoadedModel> {
      const { manifest, path } = fixture.model();
      return engine.load(manifest, path, cpuDevice(2048));
    }

    it('loads a model and reports the memory it took', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const model = await engine.load(manifest, path, cpuDevice(2048));
      expect(model.memoryMB).toBeGreaterThan(0);
      expect(model.manifest.name).toBe(manifest.name);
      // A measured figure, not the manifest's guess handed back (that would make every budget decision fiction).
      if (fixture.measuresMemory) expect(model.memoryMB).not.toBe(manifest.memoryMB);
      await model.unload();
      await engine.close();
    });

    it('runs a batch: one output per job, in order, PNGs of the asked size, with rising progress', async () => {
      const engine = fixture.engine();
      const model = await loaded(engine);
      const jobs = fixture.jobs(3);
      const progress: Progress[] = [];
      const { outputs, memory } = await model.run(jobs, (step) => progress.push(step));
      expect(outputs.map((output) => output.jobId)).toEqual(jobs.map((job) => job.id));
      expect(outputs.every((output) => output.ok)).toBe(true);
      for (const [index, output] of outputs.entries()) {
        const file = (output as Extract<JobOutput, { ok: true }>).files[0]!;
        expect(file.mediaType).toBe('image/png');
        expect(Buffer.from(file.bytes).subarray(0, 8).toString('hex')).toBe(PNG_SIGNATURE);
        expect([file.width, file.height]).toEqual([jobs[index]!.input.width, jobs[index]!.input.height]);
      }
      const steps = progress.map((step) => step.step);
      if (fixture.progress.everyStep) {
        expect(steps).toEqual(Array.from({ length: fixture.progress.total }, (_, i) => i + 1));
      } else {
        expect(steps.length).toBeGreaterThan(0);
        steps.forEach((step, i) => i > 0 && expect(step).toBeGreaterThan(steps[i - 1]!));
        expect(steps.at(-1)).toBe(fixture.progress.total);
      }
      expect(progress.at(-1)!.total).toBe(fixture.progress.total);
      if (fixture.measuresMemory) {
        expect(memory, 'a measuring engine reports the memory of each batch').toBeDefined();
        expect(memory!.residentMB).toBeGreaterThan(0);
        expect(memory!.peakMB).toBeGreaterThanOrEqual(memory!.residentMB);
      }
      await model.unload();
      await engine.close();
    });

    it('a job cancelled before its batch runs ends CANCELLED; the others are unaffected', async () => {
      const engine = fixture.engine();
      const model = await loaded(engine);
      const jobs = fixture.jobs(3);
      model.cancel([jobs[1]!.id]);
      const { outputs } = await model.run(jobs, () => {});
      expect(outputs.map((output) => output.jobId)).toEqual(jobs.map((job) => job.id));
      expect(outputs[1]).toMatchObject({ ok: false, code: 'CANCELLED', retryable: false });
      expect(outputs[0]!.ok && outputs[2]!.ok).toBe(true);
      await model.unload();
      await engine.close();
    });

    it('a job cancelled while its batch runs ends CANCELLED; the others finish', async () => {
      const engine = fixture.engine();
      const model = await loaded(engine);
      const jobs = fixture.slowJobs(3);
      let cancelled = false;
      const { outputs } = await model.run(jobs, () => {
        if (cancelled) return;
        cancelled = true;
        model.cancel([jobs[2]!.id]);
      });
      expect(cancelled).toBe(true);
      expect(outputs[2]).toMatchObject({ ok: false, code: 'CANCELLED', retryable: false });
      expect(outputs[0]!.ok && outputs[1]!.ok).toBe(true);
      await model.unload();
      await engine.close();
    });

    it('refuses an invalid input with INVALID_INPUT, not retryable', async () => {
      const engine = fixture.engine();
      const model = await loaded(engine);
      const failures = await failuresOf(model.run(fixture.invalidBatch(), () => {}));
      expect(failures.length).toBeGreaterThan(0);
      for (const failure of failures) expect(failure).toMatchObject({ code: 'INVALID_INPUT', retryable: false });
      await model.unload();
      await engine.close();
    });

    it('its processes are gone once the last model is unloaded (scale to zero); unloading twice is harmless', async () => {
      const engine = fixture.engine();
      const before = fixture.processes();
      const model = await loaded(engine);
      expect(fixture.processes()).toBe(before + 1);
      await model.unload();
      await model.unload();
      expect(fixture.processes()).toBe(before);
      await engine.close();
    });

    it(`a batch whose processes die fails with a retryable ${fixture.crashCode} instead of hanging`, async () => {
      const engine = fixture.engine();
      const model = await loaded(engine);
      const pids = fixture.pids();
      expect(pids.length).toBeGreaterThan(0);
      // Stopped before the batch is sent, killed once it is: otherwise a quick batch could finish between the
      // send and the kill on a busy machine, and rightly succeed.
      for (const pid of pids) process.kill(pid, 'SIGSTOP');
      const running = model.run(fixture.jobs(1), () => {});
      for (const pid of pids) process.kill(pid, 'SIGKILL');
      const failures = await failuresOf(running);
      expect(failures.length).toBeGreaterThan(0);
      for (const failure of failures) expect(failure).toMatchObject({ code: fixture.crashCode, retryable: true });
      await model.unload();
      await engine.close();
    });

    it.runIf(fixture.ownsProcesses)('reports its process\'s death through `exited`, and the next load starts a fresh process that works', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const others = new Set(fixture.pids());
      const first = await engine.load(manifest, path, cpuDevice(2048));
      const pid = fixture.pids().find((candidate) => !others.has(candidate));
      process.kill(pid!, 'SIGKILL');
      expect(await first.exited).toMatch(/SIGKILL/);
      const second = await engine.load(manifest, path, cpuDevice(2048));
      expect(fixture.pids()).not.toContain(pid);
      const { outputs } = await second.run(fixture.jobs(2), () => {});
      expect(outputs.every((output) => output.ok)).toBe(true);
      await first.unload(); // the dead model's unload must not end the fresh process
      expect(fixture.processes()).toBeGreaterThan(0);
      expect((await second.run(fixture.jobs(1), () => {})).outputs[0]!.ok).toBe(true);
      await second.unload();
      await engine.close();
    });

    it.runIf(fixture.ownsProcesses)('`exited` does not fire for an unload or a close the agent asked for', async () => {
      const engine = fixture.engine();
      const { manifest, path } = fixture.model();
      const unloaded = await engine.load(manifest, path, cpuDevice(2048));
      await unloaded.unload();
      const closed = await engine.load(manifest, path, cpuDevice(2048));
      await engine.close();
      expect(await within(unloaded.exited, 300)).toBe('pending');
      expect(await within(closed.exited, 300)).toBe('pending');
    });

    it.runIf(fixture.verifiesBytes)('verifies what it loads: bytes that do not hash to the digest are refused with INTEGRITY_FAILED', async () => {
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
