import { z } from 'zod';

const ms = (fallback: number) => z.int().min(1).default(fallback);

export const BackoffSettings = (initialMs: number, maxMs: number, factor: number) => z.object({
  initialMs: ms(initialMs),
  maxMs: ms(maxMs),
  factor: z.number().min(1).max(10).default(factor),
}).prefault({});

/**
 * Settings every HTTP image engine understands (in the model manifest's `settings`), beside the
 * launch settings of a server the agent starts (../shared/launch-settings.ts).
 */
export const ServerSettings = {
  /** A server the person already runs (`http://host:port`); without it the agent starts one from `command`. */
  url: z.url({ protocol: /^https?$/ }).optional(),
  /** Longest wait for one HTTP answer. A synchronous generation is one answer, so this is generous. Default 10 min. */
  requestTimeoutMs: ms(600_000),
  /** Longest a job may take once sent, when its own deadline is not sooner. Default 10 min. */
  jobTimeoutMs: ms(600_000),
  /** At load, how long to wait for the server to answer (it may still be loading its model). Default 2 min. */
  loadTimeoutMs: ms(120_000),
  /** Waits between retries while the server answers 429. Default 500 ms doubling to 5 s. */
  busyBackoff: BackoffSettings(500, 5000, 2),
};

/** The one settings parser every engine uses. */
export { parseSettings } from '../shared/settings.js';
