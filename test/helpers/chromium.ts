import { existsSync } from 'node:fs';
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
