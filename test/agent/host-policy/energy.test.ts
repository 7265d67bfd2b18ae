import { describe, expect, it } from 'vitest';
import { EnergyMeter } from '../../../src/agent/host-policy/energy.js';

const reading = (at: number, powerW: number | null) => ({ at, gpus: [{ id: 'gpu0', usedMB: 0, temperatureC: 50, powerW, powerLimitW: 175 }], processes: [] });

describe('energy from reported power', () => {
  it('the trapezoid between readings, the last power carried on after them', () => {
    const meter = new EnergyMeter();
    meter.record(reading(0, 100));
    meter.record(reading(2000, 200));
    // (100 + 200) / 2 W for 2 s = 300 J; then 200 W for another second.
    expect(meter.joulesAt('gpu0', 2000)).toBe(300);
    expect(meter.joulesAt('gpu0', 3000)).toBe(500);
    // A batch from 2.5 s to 3 s: 200 W × 0.5 s.
    expect(meter.joulesAt('gpu0', 3000)! - meter.joulesAt('gpu0', 2500)!).toBe(100);
  });

  it('nothing made up where the driver reports no power', () => {
    const meter = new EnergyMeter();
    meter.record(reading(0, null));
    expect(meter.joulesAt('gpu0', 1000)).toBeNull();
    expect(meter.joulesAt('cpu', 1000)).toBeNull();
  });
});
