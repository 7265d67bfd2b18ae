import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuDevice } from '../../../../src/agent/devices.js';
import type { BatchResult, EngineJob, InputPicture, JobOutput, Progress } from '../../../../src/agent/core/engine.js';
import { ExecEngine, GovernedCommandRunner, LocalCommandRunner, splitCommand } from '../../../../src/agent/engines/exec/index.js';
import type { ModelManifest } from '../../../../src/protocol/index.js';
import { ROOT, tempDir, waitFor } from '../../../helpers/mesh.js';
import { adapterContract } from '../../adapter-contract.js';
import { cgroupGovernor, needsCgroups } from '../../governance/helpers.js';

// The agent's governor on this host (cgroups where allowed): the runner the engine registry gives the exec engine.
const { governor, skip } = await cgroupGovernor('exec-engine-test');
afterAll(() => governor.close());

const FIXTURES = join(ROOT, 'test/fixtures/commands');
const PAINT = join(FIXTURES, 'paint.mjs');
const HANG = join(FIXTURES, 'hang.sh');
const FLOOD = join(FIXTURES, 'flood.mjs');
const NODE = process.execPath;

function manifest(settings: Record<string, unknown>, name = 'paint'): ModelManifest {
  return {
    name, version: '1', engine: 'exec', digest: `sha256:${'2'.repeat(64)}`, bytes: 0, memoryMB: 16,
    jobTypes: ['image'], params: {}, settings,
  };
}

const paintJob = (id: string, input: Record<string, unknown> = {}): EngineJob => ({
  id, input: { prompt: `a picture of ${id}`, seed: 3, width: 16, height: 12, steps: 3, stepMs: 5, ...input },
});

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const okOutput = (output: JobOutput): Extract<JobOutput, { ok: true }> => {
  if (!output.ok) throw new Error(`job ${output.jobId} failed: ${output.code} ${output.message}`);
  return output;
};

adapterContract('exec (fixture commands, governed by the agent)', {
  engine: () => new ExecEngine({ runner: new GovernedCommandRunner(governor) }),
  model: () => ({ manifest: manifest({ command: [NODE, '${MODEL_PATH}', '--job-id', '${JOB_ID}'] }), path: PAINT }),
  jobs: (n) => Array.from({ length: n }, (_, i) => paintJob(`job${i}`, { seed: i, width: 16 + 8 * i })),
  steps: (n) => 3 * n,
  check(job, output) {
    expect(output.files).toHaveLength(1);
    expect(output.files[0]).toMatchObject({ mediaType: 'image/png', width: job.input.width, height: job.input.height });
    expect(output.result).toEqual({ prompt: job.input.prompt, seed: job.input.seed, jobIdArgument: job.id, jobIdEnv: job.id });
  },
  slow: { jobs: (n) => Array.from({ length: n }, (_, i) => paintJob(`slow${i}`, { steps: 200, stepMs: 20 })) },
  bad: {
    job: () => paintJob('oom', { fail: 'CUDA out of memory' }), code: 'ENGINE_FAILED',
    message: /the command .*node exited with code 3; its last stderr lines:\npaint: loading weights\npaint: error: CUDA out of memory$/,
  },
});

describe('exec engine: batching, inputs and outputs', () => {
  const engine = new ExecEngine();
  afterAll(() => engine.close());

  it('a batching command runs once for the batch: stdin {jobs}, one output directory per job, its own progress', async () => {
    const loaded = await engine.load(manifest({ command: [NODE, PAINT, '--batch'], batch: true }), PAINT, cpuDevice(512));
    const jobs = [paintJob('b0', { seed: 1 }), paintJob('b1', { seed: 2, reject: 'no faces allowed' }), paintJob('b2', { seed: 3, width: 24 })];
    const progress: Progress[] = [];
    const outputs = (await loaded.run(jobs, (step) => progress.push(step))).outputs;
    expect(progress).toEqual([{ step: 1, total: 3 }, { step: 2, total: 3 }, { step: 3, total: 3 }]);
    expect(okOutput(outputs[0]!).result).toMatchObject({ seed: 1, jobIdEnv: null });
    expect(outputs[1]).toMatchObject({ jobId: 'b1', ok: false, code: 'ENGINE_FAILED', retryable: false, message: expect.stringMatching(/failed the job: no faces allowed/) });
    expect(okOutput(outputs[2]!).files[0]).toMatchObject({ mediaType: 'image/png', width: 24, height: 12 });
    await loaded.unload();
  });

  it('reads every output file before the run\'s scratch directory is removed', async () => {
    // Found by the netns scenario: the scratch directory was removed while outputs were still being read (a
    // `return` of a pending promise inside try/finally), so files read late failed with ENOENT, not retryable.
    const writeMany = "const fs = require('node:fs'); for (let i = 0; i < 30; i++) fs.writeFileSync(process.argv[1] + '/part' + i + '.txt', 'part ' + i);";
    const loaded = await engine.load(manifest({ command: [NODE, '-e', writeMany, '${OUTPUT_DIR}'] }, 'parts'), PAINT, cpuDevice(512));
    const outputs = (await loaded.run([paintJob('parts')], () => {})).outputs;
    expect(okOutput(outputs[0]!).files).toHaveLength(30);
    await loaded.unload();
  });

  it('takes a command as one string, split like a shell would but run without one; inputs in the ${INPUT} file', async () => {
    const loaded = await engine.load(manifest({ command: `'${NODE}' "${PAINT}" --input \${INPUT} --job-id \${JOB_ID}`, input: 'file' }), PAINT, cpuDevice(512));
    const [output] = (await loaded.run([paintJob('from-file', { seed: 9 })], () => {})).outputs;
    expect(okOutput(output!).result).toMatchObject({ seed: 9, jobIdArgument: 'from-file' });
    await loaded.unload();
  });

  it('exit 75 (EX_TEMPFAIL) is retryable; a command killed by a signal is ENGINE_CRASHED', async () => {
    const loaded = await engine.load(manifest({ command: [NODE, PAINT] }), PAINT, cpuDevice(512));
    const [tempfail] = (await loaded.run([paintJob('busy', { tempfail: true })], () => {})).outputs;
    expect(tempfail).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: true, message: expect.stringMatching(/exited with code 75.*the GPU is busy/s) });
    const killed = await engine.load(manifest({ command: ['sh', '-c', 'echo dying >&2; kill -KILL $$'] }, 'killed'), PAINT, cpuDevice(512));
    const [crashed] = (await killed.run([paintJob('k')], () => {})).outputs;
    expect(crashed).toMatchObject({ ok: false, code: 'ENGINE_CRASHED', retryable: true, message: expect.stringMatching(/killed by SIGKILL; its last stderr lines:\ndying/) });
    const silent = await engine.load(manifest({ command: ['true'] }, 'silent'), PAINT, cpuDevice(512));
    const [empty] = (await silent.run([paintJob('e')], () => {})).outputs;
    expect(empty).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: false, message: expect.stringMatching(/left no files and no result\.json/) });
  });

  it('refuses at load a program that is not there, an unknown placeholder, ${JOB_ID} in a batching command, a bad quote', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ command: ['no-such-program-gpumesh', '--x'] }, /settings\.command: cannot start "no-such-program-gpumesh": not found on PATH/],
      [{ command: [NODE, PAINT, '${OUTPUT}'] }, /unknown placeholder \$\{OUTPUT\}/],
      [{ command: [NODE, PAINT, '${JOB_ID}'], batch: true }, /\$\{JOB_ID\} names one job, but settings\.batch/],
      [{ command: [NODE, PAINT, '${IMAGE}'], batch: true, pictures: ['image'] }, /\$\{IMAGE\} names one job's picture, but settings\.batch runs one process for many; read each job's pictures from the input/],
      [{ command: [NODE, PAINT], pictures: ['video'] }, /invalid settings: settings\.pictures/],
      [{ command: `${NODE} "${PAINT}` }, /unterminated double quote/],
      [{ command: [NODE], timeoutMs: -1 }, /invalid settings: settings\.timeoutMs/],
    ];
    for (const [settings, message] of cases) {
      const loading = engine.load(manifest(settings), PAINT, cpuDevice(512));
      await expect(loading).rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false });
      await expect(loading).rejects.toThrow(message);
    }
  });
});

describe('exec engine: pictures as files', () => {
  const engine = new ExecEngine();
  afterAll(() => engine.close());
  /** A 4×2 RGB picture, as the agent hands an engine one (decoded, sized to the job). */
  const picture: InputPicture = { data: Uint8Array.from({ length: 4 * 2 * 3 }, (_, i) => (i * 37) % 256), width: 4, height: 2, channels: 3 };
  const mask: InputPicture = { data: Uint8Array.from([0, 255, 0, 255, 255, 0, 255, 0]), width: 4, height: 2, channels: 1 };
  // Copies what it is given (${IMAGE}, GPUMESH_MASK, the input's `pictures`) into its output, and says what it saw.
  const COPY = `const fs = require('node:fs'); const [image, out] = process.argv.slice(1); const input = JSON.parse(fs.readFileSync(0, 'utf8'));
    fs.copyFileSync(image, out + '/image.png'); if (process.env.GPUMESH_MASK) fs.copyFileSync(process.env.GPUMESH_MASK, out + '/mask.png');
    fs.writeFileSync(out + '/result.json', JSON.stringify({ image, fromInput: input.pictures }));`;

  it('writes a job\'s picture and mask as PNG files of its size: ${IMAGE}, GPUMESH_MASK and the input\'s pictures name them', async () => {
    const loaded = await engine.load(manifest({ command: [NODE, '-e', COPY, '${IMAGE}', '${OUTPUT_DIR}'], pictures: ['image', 'mask'] }, 'copy'), NODE, cpuDevice(512));
    const [output] = (await loaded.run([{ ...paintJob('pic'), pictures: { image: picture, mask } }], () => {})).outputs;
    const { files, result } = okOutput(output!);
    const [image, copiedMask] = await Promise.all(files.map((file) => sharp(Buffer.from(file.bytes)).raw().toBuffer({ resolveWithObject: true })));
    expect(image!.info).toMatchObject({ width: 4, height: 2, channels: 3 });
    expect([...image!.data]).toEqual([...picture.data]);
    // The mask as the client's convention has it: its alpha (transparent marks what to repaint).
    expect(copiedMask!.info).toMatchObject({ width: 4, height: 2, channels: 4 });
    expect([...copiedMask!.data].filter((_, i) => i % 4 === 3)).toEqual([...mask.data]);
    expect(result).toEqual({ image: expect.stringMatching(/image\.png$/), fromInput: { image: (result as { image: string }).image, mask: expect.stringMatching(/mask\.png$/) } });
    await loaded.unload();
  });

  it('a batching command finds each job\'s pictures in its input; a job naming a picture its model is not given is refused, not run without it', async () => {
    const readPictures = `const fs = require('node:fs'); const { jobs } = JSON.parse(fs.readFileSync(0, 'utf8'));
      for (const job of jobs) fs.writeFileSync(job.outputDir + '/result.json', JSON.stringify({ pictures: job.pictures ?? null, exists: job.pictures ? fs.existsSync(job.pictures.image) : null }));`;
    const loaded = await engine.load(manifest({ command: [NODE, '-e', readPictures], batch: true, pictures: ['image'] }, 'batch-pictures'), NODE, cpuDevice(512));
    const outputs = (await loaded.run([{ ...paintJob('with'), pictures: { image: picture } }, paintJob('without'), { ...paintJob('masked'), pictures: { image: picture, mask } }], () => {})).outputs;
    expect(okOutput(outputs[0]!).result).toEqual({ pictures: { image: expect.stringMatching(/with\/image\.png$/) }, exists: true });
    expect(okOutput(outputs[1]!).result).toEqual({ pictures: null, exists: null });
    expect(outputs[2]).toMatchObject({ jobId: 'masked', ok: false, code: 'INVALID_INPUT', retryable: false, message: expect.stringMatching(/^mask: this exec model's command is given no mask/) });
    await loaded.unload();
  });
});

describe('exec engine: commands that hang or flood', () => {
  const engine = new ExecEngine();
  afterAll(() => engine.close());

  async function hanging(settings: Record<string, unknown> = {}): Promise<{ run: Promise<BatchResult>; pids: number[]; cancel(): void }> {
    const pidFile = join(tempDir(), 'pids');
    const loaded = await engine.load(manifest({ command: ['sh', HANG, pidFile], ...settings }, 'hang'), HANG, cpuDevice(512));
    let progressed = false;
    const run = loaded.run([paintJob('h')], () => (progressed = true));
    await waitFor(() => progressed, { what: 'the hanging command to report progress' });
    const pids = readFileSync(pidFile, 'utf8').trim().split(' ').map(Number);
    expect(pids.every(alive)).toBe(true);
    return { run, pids, cancel: () => loaded.cancel(['h']) };
  }

  it('cancel ends the whole process group: the command and the child it started', async () => {
    const { run, pids, cancel } = await hanging();
    cancel();
    expect((await run).outputs).toMatchObject([{ ok: false, code: 'CANCELLED', retryable: false }]);
    await waitFor(() => pids.every((pid) => !alive(pid)), { what: 'both processes to be gone' });
  });

  it('a timeout ends the group and fails the job retryably, quoting its stderr', async () => {
    const { run, pids } = await hanging({ timeoutMs: 1500, killGraceMs: 200 });
    const { outputs: [output] } = await run;
    expect(output).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: true });
    expect((output as { message: string }).message).toMatch(/ran longer than 1500 ms and was stopped; its last stderr lines:\nhang: waiting forever/);
    await waitFor(() => pids.every((pid) => !alive(pid)), { what: 'both processes to be gone' });
  });

  it('a command that ignores SIGTERM is killed (SIGKILL) once the grace is over', async () => {
    const stubborn = `process.on('SIGTERM', () => console.error('stubborn: ignoring SIGTERM')); setInterval(() => {}, 1000);`;
    const loaded = await engine.load(manifest({ command: [NODE, '-e', stubborn], timeoutMs: 2500, killGraceMs: 300 }, 'stubborn'), NODE, cpuDevice(512));
    const started = performance.now();
    const [output] = (await loaded.run([paintJob('s')], () => {})).outputs;
    expect(performance.now() - started).toBeLessThan(8000);
    expect(output).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: true });
    expect((output as { message: string }).message).toMatch(/ran longer than 2500 ms and was stopped; its last stderr lines:\nstubborn: ignoring SIGTERM/);
  });

  it('a flood of output is kept to a bounded tail: the error quotes the last stderr line, progress still parses', async () => {
    const loaded = await engine.load(manifest({ command: [NODE, FLOOD], maxOutputBytes: 4096 }, 'flood'), FLOOD, cpuDevice(512));
    const progress: Progress[] = [];
    const [output] = (await loaded.run([paintJob('f')], (step) => progress.push(step))).outputs;
    expect(progress).toEqual([{ step: 1, total: 1 }]);
    expect(output).toMatchObject({ ok: false, code: 'ENGINE_FAILED', retryable: false });
    const message = (output as { message: string }).message;
    expect(message).toMatch(/exited with code 4; its last stderr lines:\n…x+\n(x+\n)*flood: the last words$/);
    expect(message.length).toBeLessThan(2200);
  });
});

describe('exec engine: the command runner and the command line', () => {
  it('splits a command line like a shell, without one', () => {
    expect(splitCommand(`python3 'run me.py' --prompt "a \\"quoted\\" word" plain\\ space $HOME '' x|y`)).toEqual([
      'python3', 'run me.py', '--prompt', 'a "quoted" word', 'plain space', '$HOME', '', 'x|y',
    ]);
    expect(() => splitCommand(`echo 'open`)).toThrow(/unterminated single quote/);
    expect(() => splitCommand('echo \\')).toThrow(/a backslash ends the command/);
  });

  it('reports a program that cannot start instead of throwing', async () => {
    const result = await new LocalCommandRunner().run({
      argv: ['/nonexistent/gpumesh-program'], env: process.env, stdin: null, timeoutMs: 5000, maxOutputBytes: 1024, killGraceMs: 100,
    });
    expect(result.spawnError).toMatch(/ENOENT/);
    expect(result.exitCode).not.toBe(0);
  });
});

describe('exec engine under the agent\'s governance', () => {
  const engine = new ExecEngine({ runner: new GovernedCommandRunner(governor) });
  afterAll(() => engine.close());
  const HOG = join(ROOT, 'test/fixtures/engines/memory-hog.mjs');

  it(needsCgroups('a command the kernel kills at the model\'s memory limit fails its jobs with ENGINE_OOM, naming the limit', skip), async () => {
    if (skip) return;
    const loaded = await engine.load(manifest({ command: [NODE, HOG], memoryLimitMB: 150 }, 'hog'), null, cpuDevice(2048));
    const { outputs } = await loaded.run([paintJob('hog')], () => {});
    expect(outputs[0]).toMatchObject({ ok: false, code: 'ENGINE_OOM', retryable: true, message: expect.stringMatching(/exceeded its cgroup memory limit of 150 MB/) });
    await loaded.unload();
  });

  it('a program that cannot start is reported, not thrown; the agent\'s own variables never reach a command', async () => {
    const result = await new GovernedCommandRunner(governor).run({
      argv: ['/nonexistent/gpumesh-program'], env: process.env, stdin: null, timeoutMs: 5000, maxOutputBytes: 1024, killGraceMs: 100,
    });
    expect(result.spawnError).toMatch(/cannot start "\/nonexistent\/gpumesh-program"/);
    process.env.GPUMESH_GRANT = 'the agent grant must not leak';
    try {
      const loaded = await engine.load(manifest({ command: [NODE, '-e', 'process.stdout.write(JSON.stringify({ error: { message: String(process.env.GPUMESH_GRANT) } }) + "\\n")'] }, 'env'), null, cpuDevice(2048));
      const { outputs } = await loaded.run([paintJob('env')], () => {});
      expect(outputs[0]).toMatchObject({ ok: false, message: expect.stringMatching(/failed the job: undefined$/) });
      await loaded.unload();
    } finally {
      delete process.env.GPUMESH_GRANT;
    }
  });
});
