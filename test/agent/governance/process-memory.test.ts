import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import { parseComputeApps, PeakMeter, resetPeak, rssMB } from '../../../src/agent/governance/process-memory.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

describe('process memory', () => {
  it.runIf(resetPeak('self'))('the kernel-peak meter catches memory freed again inside the window (which samples miss)', () => {
    gc();
    const meter = new PeakMeter('self');
    expect(meter.method).toBe('kernel');
    const close = meter.open();
    // 200 MB touched, then freed before the window closes: like a runtime's intermediate tensors within one run.
    let transient: Buffer | null = Buffer.alloc(200 * 1024 * 1024, 1);
    expect(transient.length).toBeGreaterThan(0);
    transient = null;
    gc();
    const window = close();
    expect(window.method).toBe('kernel');
    expect(window.peakMB - window.startMB).toBeGreaterThan(180);
    expect(window.endMB - window.startMB).toBeLessThan(100);
  });

  it('without the kernel mark it falls back to samples', () => {
    const meter = new PeakMeter('self', { kernelPeak: false });
    expect(meter.method).toBe('samples');
    const close = meter.open();
    const held = Buffer.alloc(64 * 1024 * 1024, 1);
    meter.sample();
    const window = close();
    expect(held.length).toBeGreaterThan(0);
    expect(window.peakMB - window.startMB).toBeGreaterThan(50);
    expect(rssMB('self')).toBeGreaterThan(0);
  });

  it.runIf(resetPeak('self'))('overlapping windows: the later one does not erase the earlier one\'s peak', () => {
    gc();
    const meter = new PeakMeter('self');
    const closeFirst = meter.open();
    let transient: Buffer | null = Buffer.alloc(150 * 1024 * 1024, 1);
    expect(transient.length).toBeGreaterThan(0);
    transient = null;
    gc();
    const closeSecond = meter.open(); // must not reset the mark while the first window is open
    closeSecond();
    const first = closeFirst();
    expect(first.peakMB - first.startMB).toBeGreaterThan(130);
  });

  it('parses nvidia-smi\'s per-process GPU memory, summed over GPUs, skipping what it cannot read', () => {
    const csv = ['4242, 1536', '4242, 512', '977, 80', '13, [N/A]', '', 'No running processes found'].join('\n');
    expect([...parseComputeApps(csv)]).toEqual([[4242, 2048], [977, 80]]);
  });
});
