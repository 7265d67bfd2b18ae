import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCommand } from '../../../src/agent/governance/index.js';
import { cgroupGovernor, expectNothingLeft, silentLog } from './helpers.js';

const { governor } = await cgroupGovernor('command-runner-test');
afterAll(() => governor.close());

describe('one-shot commands (per-batch: ffmpeg, user scripts)', () => {
  it('runs to completion with its stdout, variables as single arguments, and nothing a shell would do', async () => {
    const marker = join(tmpdir(), `gpumesh-pwned-${process.pid}`);
    const result = await runCommand(governor, {
      name: 'printf', settings: { command: "printf '%s|' ${INPUT} \"${OUTPUT}\" $HOME" },
      variables: { INPUT: `a b; touch ${marker}`, OUTPUT: `$(touch ${marker})` },
    }, silentLog);
    expect(result).toMatchObject({ ok: true, code: 0, signal: null, stdoutTruncated: false });
    expect(result.reason.kind).toBe('exited');
    expect(result.stdout.toString()).toBe(`a b; touch ${marker}|$(touch ${marker})|$HOME|`);
    expect(existsSync(marker)).toBe(false);
  });

  it('a failing command: its exit code and the last lines of its stderr', async () => {
    const result = await runCommand(governor, { name: 'fails', settings: { command: `sh -c 'echo one >&2; echo two >&2; echo out; exit 7'` } }, silentLog);
    expect(result).toMatchObject({ ok: false, code: 7, stderrTail: ['one', 'two'] });
    expect(result.reason.message).toMatch(/exited with code 7/);
    expect(result.stdout.toString()).toBe('out\n');
  });

  it('past its timeout it is stopped: SIGTERM to its group, then SIGKILL for what ignores it', async () => {
    const polite = await runCommand(governor, { name: 'sleep', settings: { command: 'sleep 30', timeoutMs: 300 } }, silentLog);
    expect(polite.reason).toMatchObject({ kind: 'timeout', signal: 'SIGTERM' });
    expect(polite.durationMs).toBeLessThan(10_000);
    // `trap "" TERM` is inherited by sleep: the whole group ignores SIGTERM.
    const stubborn = await runCommand(governor, { name: 'stubborn', settings: { command: `sh -c 'trap "" TERM; sleep 30'`, timeoutMs: 300, stopGraceMs: 300 } }, silentLog);
    expect(stubborn.reason).toMatchObject({ kind: 'timeout', signal: 'SIGKILL' });
    await expectNothingLeft(stubborn.reason.pid, []);
  });

  it('an abort (a cancelled batch) stops it', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 200);
    const result = await runCommand(governor, { name: 'sleep', settings: { command: 'sleep 30' }, signal: controller.signal }, silentLog);
    expect(result.reason.kind).toBe('stopped');
    expect(result.ok).toBe(false);
  });

  it('stdout beyond maxStdoutBytes is read and dropped; stdin is fed; the GPU is the only one it sees', async () => {
    const flood = await runCommand(governor, { name: 'head', settings: { command: 'head -c 5000000 /dev/zero', maxStdoutBytes: 1000 } }, silentLog);
    expect(flood).toMatchObject({ ok: true, stdoutTruncated: true });
    expect(flood.stdout.length).toBe(1000);
    const cat = await runCommand(governor, { name: 'cat', settings: { command: 'cat' }, stdin: 'fed through stdin' }, silentLog);
    expect(cat.stdout.toString()).toBe('fed through stdin');
    const gpu = await runCommand(governor, { name: 'env', settings: { command: `sh -c 'echo "$CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER $0"' \${GPU}` }, gpu: 2 }, silentLog);
    expect(gpu.stdout.toString()).toBe('2 PCI_BUS_ID 2\n');
  });

  it('a program that is not there is refused before anything starts', async () => {
    await expect(runCommand(governor, { name: 'nope', settings: { command: 'no-such-ffmpeg -i x' } }, silentLog))
      .rejects.toMatchObject({ code: 'ENGINE_FAILED', retryable: false });
  });
});
