// Types for reloader.js (a plain ES module the browser loads as is), for the tests that import it.

export interface ReloaderTimers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(id: unknown): void;
  setInterval(callback: () => void, ms: number): unknown;
  clearInterval(id: unknown): void;
}

export interface ReloaderOptions {
  reload(): Promise<void>;
  onError?(error: unknown): void;
  /** How long a request waits for others to join it (default 150 ms). */
  delayMs?: number;
  /** The least time between the starts of two reloads (default 500 ms). */
  gapMs?: number;
  /** The slow reload's period (default 15 s). */
  everyMs?: number;
  now?(): number;
  timers?: ReloaderTimers;
}

export interface Reloader {
  request(delayMs?: number): void;
  start(): void;
  stop(): void;
}

export function createReloader(options: ReloaderOptions): Reloader;
