import type { GpuSample } from './gpu-telemetry.js';

/**
 * The energy each GPU has drawn since the agent started watching, from the power its driver reports at each reading:
 * between two readings the trapezoid of their powers, after the last one its power carried on (power samples × time).
 * A device whose driver reports no power has no figure: nothing is made up.
 */
export class EnergyMeter {
  readonly #devices = new Map<string, { joules: number; powerW: number; at: number }>();

  /** Take a reading in: each GPU's power at its moment. */
  record(sample: GpuSample): void {
    for (const gpu of sample.gpus) {
      if (gpu.powerW === null) continue;
      const last = this.#devices.get(gpu.id);
      const joules = last ? last.joules + ((last.powerW + gpu.powerW) / 2) * Math.max(0, sample.at - last.at) / 1000 : 0;
      this.#devices.set(gpu.id, { joules, powerW: gpu.powerW, at: sample.at });
    }
  }

  /** The energy drawn by `device` up to `at` (J, from when it was first read), or null where it reports no power. */
  joulesAt(device: string, at: number): number | null {
    const last = this.#devices.get(device);
    return last ? last.joules + last.powerW * Math.max(0, at - last.at) / 1000 : null;
  }
}
