import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser } from 'playwright-core';

/** Debian's Chromium (`apt-get install chromium`, done by `npm run setup-tests`); CHROMIUM_PATH overrides where. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export const hasChromium = (): boolean => existsSync(CHROMIUM);

/** Headless Chromium with nothing of its own on the network (no updates, sync or QUIC), for the browser tests. */
export function launchChromium(extraArgs: readonly string[] = []): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-quic', '--disable-sync', ...extraArgs],
  });
}

/**
 * Where a browser test keeps a screenshot: `test-artifacts/<name>.png` under the checkout (git-ignored; CI may
 * upload the folder), or under TEST_ARTIFACTS when set.
 */
export function screenshotPath(name: string): string {
  const dir = process.env.TEST_ARTIFACTS ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test-artifacts');
  mkdirSync(dir, { recursive: true });
  return join(dir, `${name}.png`);
}
