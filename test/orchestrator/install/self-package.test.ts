import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SelfPackage, type Packer } from '../../../src/orchestrator/install/self-package.js';
import { MeshError } from '../../../src/protocol/index.js';
import { tempDirsPerTest } from '../../helpers/mesh.js';

const newDir = tempDirsPerTest();

/** A package folder with package.json's `files` and a packer that writes the folder's files as the "tarball". */
function fixture(): { root: string; dir: string; packs: string[]; packer: Packer } {
  const root = newDir('gpumesh-self-package-');
  writeFileSync(join(root, 'package.json'), JSON.stringify({ name: 'gpumesh', version: '9.8.7', files: ['dist', 'README.md'] }));
  mkdirSync(join(root, 'dist'));
  writeFileSync(join(root, 'dist', 'main.js'), 'one');
  writeFileSync(join(root, 'README.md'), 'read me');
  writeFileSync(join(root, 'notes.txt'), 'not shipped');
  const packs: string[] = [];
  const packer: Packer = async (from, destination) => {
    const contents = readFileSync(join(from, 'dist', 'main.js'), 'utf8');
    packs.push(contents);
    const file = join(destination, 'gpumesh-9.8.7.tgz');
    writeFileSync(file, `tarball of ${contents}`);
    return file;
  };
  return { root, dir: join(root, '.data', 'install'), packs, packer };
}

describe('the orchestrator\'s own package', () => {
  it('is packed once, with its digests, and reused by the next start while the shipped files are unchanged', async () => {
    const { root, dir, packs, packer } = fixture();
    const first = await new SelfPackage({ root, dir, pack: packer }).get();
    const bytes = Buffer.from('tarball of one');
    expect(first).toEqual({
      path: join(dir, 'gpumesh.tgz'), bytes: bytes.length, version: '9.8.7',
      sha256: createHash('sha256').update(bytes).digest('hex'), integrity: `sha512-${createHash('sha512').update(bytes).digest('base64')}`,
    });
    expect(readFileSync(first.path, 'utf8')).toBe('tarball of one');
    // A restart with the same files: no second pack. A file outside `files` does not count.
    writeFileSync(join(root, 'notes.txt'), 'changed, but not shipped');
    expect(await new SelfPackage({ root, dir, pack: packer }).get()).toEqual(first);
    expect(packs).toEqual(['one']);
  });

  it('is packed again after a rebuild changed a shipped file', async () => {
    const { root, dir, packs, packer } = fixture();
    const first = await new SelfPackage({ root, dir, pack: packer }).get();
    writeFileSync(join(root, 'dist', 'main.js'), 'two');
    utimesSync(join(root, 'dist', 'main.js'), new Date(), new Date(Date.now() + 5_000));
    const second = await new SelfPackage({ root, dir, pack: packer }).get();
    expect(packs).toEqual(['one', 'two']);
    expect(second.sha256).not.toBe(first.sha256);
    expect(readFileSync(second.path, 'utf8')).toBe('tarball of two');
  });

  it('packs once for requests that arrive together; a failure is an INSTALL_PACKAGE_UNAVAILABLE and is not kept', async () => {
    const { root, dir, packs, packer } = fixture();
    let fail = true;
    const flaky: Packer = async (from, destination) => {
      if (fail) throw new Error('npm pack failed in /x: npm ERR! something');
      return packer(from, destination);
    };
    const selfPackage = new SelfPackage({ root, dir, pack: flaky });
    const refused = await selfPackage.get().catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(MeshError);
    expect(refused).toMatchObject({ code: 'INSTALL_PACKAGE_UNAVAILABLE', status: 503, message: expect.stringContaining('npm ERR! something') });
    fail = false;
    const [a, b] = await Promise.all([selfPackage.get(), selfPackage.get()]);
    expect(a).toEqual(b);
    expect(packs).toEqual(['one']);
  });
});
