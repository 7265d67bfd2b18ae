import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERRORS, formatError, MeshError } from '../../src/protocol/index.js';

const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');

describe('the error registry', () => {
  it('every code is documented in docs/errors.md with its status', () => {
    for (const [code, { status }] of Object.entries(ERRORS)) {
      expect(doc, code).toMatch(new RegExp(`\\| \`${code}\` \\| ${status} \\|`));
    }
  });

  it('docs/errors.md lists no code the registry lacks', () => {
    const documented = [...doc.matchAll(/^\| `([A-Z_]+)` \|/gm)].map((match) => match[1]);
    expect(documented.sort()).toEqual(Object.keys(ERRORS).sort());
  });

  it('client mistakes are 4xx and templates fill in', () => {
    expect(new MeshError('QUEUE_FULL', { model: 'gen', depth: 3, limit: 3, retryAfter: 2 }).message)
      .toBe('The queue of model "gen" is full (3 of 3 jobs); retry after 2s');
    expect(formatError('NOT_FOUND', {})).toContain('{what}');
    for (const code of ['VALIDATION_FAILED', 'GRANT_MISSING', 'GRANT_DENIED', 'QUEUE_FULL', 'INVALID_INPUT'] as const) {
      expect(ERRORS[code].status).toBeGreaterThanOrEqual(400);
      expect(ERRORS[code].status).toBeLessThan(500);
    }
  });
});
