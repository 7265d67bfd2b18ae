import { z } from 'zod';

/** `GET /v1/series`: one `times` axis (Unix seconds, each step's end) and series aligned with it. */
export const SeriesView = z.strictObject({
  stepMs: z.int(),
  windowMs: z.int(),
  times: z.array(z.int()).describe('each point\'s time, seconds since the epoch'),
  /** Per model; null where the model had no point (not known yet, or no job ended in the step for latencies). */
  models: z.record(z.string(), z.strictObject({
    succeededPerSecond: z.array(z.number().nullable()), failedPerSecond: z.array(z.number().nullable()), queueDepth: z.array(z.number().nullable()),
    p50Ms: z.array(z.number().nullable()), p99Ms: z.array(z.number().nullable()),
  })),
  /** Per device, keyed `host/device`; null while the host was not connected. */
  devices: z.record(z.string(), z.strictObject({
    host: z.string(), device: z.string(), budgetMB: z.number(), usedMB: z.array(z.number().nullable()),
    /** A GPU's temperature (°C) and power draw (W) at each step; null where its driver said nothing (a CPU). */
    temperatureC: z.array(z.number().nullable()), powerW: z.array(z.number().nullable()),
  })).describe('keyed host/device'),
});
export type SeriesView = z.infer<typeof SeriesView>;
