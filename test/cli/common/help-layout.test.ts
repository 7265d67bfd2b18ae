import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { wrapParagraphs } from '../../../src/cli/common/help.js';
import { GALLERY_GRANT_SUMMARY, galleryGrantOptions } from '../../../src/protocol/api/index.js';
import { ROOT } from '../../helpers/mesh.js';
import { gpumeshRun } from '../../helpers/processes.js';

const COMMANDS = [[], ['up'], ['serve'], ['agent'], ['submit'], ['status'], ['explain'], ['jobs'], ['blobs'], ['grant'], ['grant', 'create'], ['grant', 'gallery'], ['models'], ['audit']];

/** `--help` as a person sees it in a pipe (80 columns). */
const help = async (command: string[]): Promise<string> => {
  const run = await gpumeshRun([...command, '--help'], { COLUMNS: '80' });
  expect(run.code, run.output).toBe(0);
  return run.stdout;
};

describe('--help', () => {
  it('every command lays its help out the same way: each subcommand one summary, wrapped to 80 columns', async () => {
    for (const command of COMMANDS) {
      const text = await help(command);
      const [head, rest = ''] = text.split(/\n(?=Options:|Commands:|Arguments:)/, 2) as [string, string?];
      // Past the description, every line fits; in the description only an indented line (a command to copy) may not.
      for (const line of rest.split('\n')) expect(Array.from(line).length, `${command.join(' ')}: ${line}`).toBeLessThanOrEqual(80);
      for (const line of head.split('\n')) if (Array.from(line).length > 80) expect(line, command.join(' ')).toMatch(/^\s/);
    }
    // The line that ran across the column layout: `grant create`'s long description, now its first sentence, wrapped.
    const grant = await help(['grant']);
    expect(grant).toMatch(/\n {2}create \[options\] +Mint a new grant \(needs an admin grant\)\.\n {34}Client grants/);
    expect(grant).not.toContain('A TLS mesh adds');
  }, 60_000);

  it('wraps paragraphs and keeps an indented line whole', () => {
    expect(wrapParagraphs('one two three four five six seven eight nine ten eleven twelve thirteen fourteen\nfifteen\n  npx --yes a-very-long-command-line-that-is-not-wrapped-because-it-is-meant-to-be-copied\nend', 40)).toBe(
      'one two three four five six seven eight\nnine ten eleven twelve thirteen fourteen\nfifteen\n  npx --yes a-very-long-command-line-that-is-not-wrapped-because-it-is-meant-to-be-copied\nend',
    );
  });
});

describe('the gallery grant is described once, the same everywhere', () => {
  it('README, `grant gallery --help` and the grant itself: images and clips', async () => {
    expect(galleryGrantOptions(['default'], '12h').types).toEqual(['image', 'video']);
    expect(GALLERY_GRANT_SUMMARY).toContain('images and clips');
    expect((await help(['grant', 'gallery'])).replace(/\s+/g, ' ')).toContain(GALLERY_GRANT_SUMMARY);
    expect(readFileSync(join(ROOT, 'README.md'), 'utf8').replace(/\s+/g, ' ')).toContain(GALLERY_GRANT_SUMMARY);
  }, 30_000);
});
