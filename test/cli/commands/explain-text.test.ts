import { describe, expect, it } from 'vitest';
import { routeText } from '../../../src/cli/commands/explain.js';

describe('gpumesh explain: a route in one line', () => {
  it('names the chosen host and the hosts passed over, then counts the ones the log did not name', () => {
    expect(routeText({
      host: 'laptop', class: 'image', warmth: 'resident',
      skipped: [{ host: 'desktop', reason: 'no free slot' }, { host: 'cloud', reason: 'breaker open' }],
      unlisted: { 'not sampled': 940, 'class not granted': 40 },
    })).toBe('laptop (image, resident); passed over: desktop (no free slot), cloud (breaker open), 940 more (not sampled), 40 more (class not granted)');
  });

  it('reads a route logged before the counts existed, and says when none was recorded', () => {
    expect(routeText({ host: 'laptop', class: 'image', warmth: 'cold', skipped: [] } as never)).toBe('laptop (image, cold)');
    expect(routeText(null)).toBe('no route recorded');
  });
});
