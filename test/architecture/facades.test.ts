import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/mesh.js';

/**
 * The agent's root file is a facade: it builds its parts (link/, session/, batches/, models/, host-policy/, video/,
 * relay/), wires them and starts them; what each part does lives in the part. Past 300 lines it has started to do
 * their work itself again (docs/architecture.md, "The agent").
 */
describe('facades stay facades', () => {
  it('src/agent/agent.ts is at most 300 lines', () => {
    const lines = readFileSync(join(ROOT, 'src/agent/agent.ts'), 'utf8').split('\n').length;
    expect(lines, 'src/agent/agent.ts: move what grew into the part it belongs to').toBeLessThanOrEqual(300);
  });
});
