import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { MeshError } from '../../protocol/index.js';

/** The package an orchestrator serves to the hosts that join it (`GET /install/gpumesh.tgz`). */
export interface PackageFile {
  path: string;
  bytes: number;
  version: string;
  /** Lowercase hex SHA-256 of the tarball: the join line names it, the content-addressed URL carries it. */
  sha256: string;
  /** The tarball's Subresource Integrity (`sha512-<base64>`), the form npm records in lockfiles. */
  integrity: string;
}

/** Makes an npm tarball of the package in `root` inside `destination`; resolves to its path. */
export type Packer = (root: string, destination: string) => Promise<string>;

/**
 * `npm pack` of the package itself — the same files, `package.json` and `files` list an `npm publish` would ship.
 * `--ignore-scripts`: the orchestrator runs from built files, and `prepare` (tsc) is neither needed nor, in an
 * installed copy, possible. npm is where Node is (it ships with it); Windows names it npm.cmd, which needs a shell.
 */
const npmPack: Packer = (root, destination) => new Promise((resolve, reject) => {
  const windows = process.platform === 'win32';
  execFile(windows ? 'npm.cmd' : 'npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', destination], {
    cwd: root, shell: windows, timeout: 120_000, maxBuffer: 16 * 1024 * 1024,
  }, (error, stdout, stderr) => {
    if (error) {
      // These Errors become INSTALL_PACKAGE_UNAVAILABLE (503) where the package is asked for (below).
      reject(new Error(`npm pack failed in ${root}: ${(stderr || error.message).trim().split('\n').slice(-3).join(' ')}`));
      return;
    }
    try {
      const [packed] = JSON.parse(stdout) as { filename: string }[];
      if (!packed) throw new Error('it packed nothing');
      resolve(join(destination, packed.filename));
    } catch (cause) {
      reject(new Error(`npm pack in ${root} printed no package: ${(cause as Error).message}`));
    }
  });
});

/** What `<dir>/gpumesh.json` records beside the tarball, so a restart with the same files does not pack again. */
interface PackRecord {
  sources: string;
  file: Omit<PackageFile, 'path'>;
}

const TARBALL = 'gpumesh.tgz';
const RECORD = 'gpumesh.json';

/**
 * The orchestrator's own npm package, so a bare machine with only Node can join with one `npx` line. Made with
 * `npm pack` on first request, not at build time: `npm pack` runs `prepare` (the build), so a build that packed would
 * pack itself in a loop, and an installed copy of gpumesh has no build step at all — but it has its package.json and
 * built files, which is all `npm pack --ignore-scripts` needs, from a clone and from an install alike. Kept in the data
 * folder with a fingerprint of the files it was made from (their paths, sizes and times): a restart reuses it while the
 * files are unchanged, and packs again after a rebuild or an upgrade. Made once per process: what is served is
 * what was on disk when the first host asked.
 */
export class SelfPackage {
  readonly #root: string;
  readonly #dir: string;
  readonly #pack: Packer;
  #made: Promise<PackageFile> | null = null;

  constructor(deps: { root: string; dir: string; pack?: Packer }) {
    this.#root = deps.root;
    this.#dir = deps.dir;
    this.#pack = deps.pack ?? npmPack;
  }

  /** The package, made (or found made) on the first call. A failure is not kept: the next call tries again. */
  get(): Promise<PackageFile> {
    this.#made ??= this.#make().catch((error: unknown) => {
      this.#made = null;
      throw error instanceof MeshError ? error : new MeshError('INSTALL_PACKAGE_UNAVAILABLE', { detail: (error as Error).message }, { cause: error });
    });
    return this.#made;
  }

  async #make(): Promise<PackageFile> {
    const sources = this.#fingerprint();
    const tarball = join(this.#dir, TARBALL);
    const known = this.#record();
    if (known?.sources === sources && existsSync(tarball) && statSync(tarball).size === known.file.bytes) return { path: tarball, ...known.file };

    mkdirSync(this.#dir, { recursive: true });
    // Packed into a folder of this process's own and renamed into place: a reader never sees half a tarball.
    const scratch = join(this.#dir, `.pack-${process.pid}-${randomBytes(6).toString('hex')}`);
    mkdirSync(scratch);
    try {
      const packed = await this.#pack(this.#root, scratch);
      const { sha256, integrity, bytes } = await digestsOf(packed);
      const version = (JSON.parse(readFileSync(join(this.#root, 'package.json'), 'utf8')) as { version: string }).version;
      renameSync(packed, tarball);
      const record: PackRecord = { sources, file: { bytes, version, sha256, integrity } };
      writeFileSync(join(this.#dir, RECORD), `${JSON.stringify(record, null, 2)}\n`);
      return { path: tarball, ...record.file };
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }

  #record(): PackRecord | null {
    try {
      return JSON.parse(readFileSync(join(this.#dir, RECORD), 'utf8')) as PackRecord;
    } catch {
      return null;
    }
  }

  /** A hash of what `npm pack` would read: package.json and every file under its `files` entries (path, size, mtime). */
  #fingerprint(): string {
    const manifest = join(this.#root, 'package.json');
    if (!existsSync(manifest)) throw new Error(`no package.json in ${this.#root}`);
    const { files = [] } = JSON.parse(readFileSync(manifest, 'utf8')) as { files?: string[] };
    const hash = createHash('sha256');
    const add = (path: string): void => {
      const stats = statSync(path, { throwIfNoEntry: false });
      if (!stats) return;
      if (stats.isDirectory()) {
        for (const entry of readdirSync(path).sort()) add(join(path, entry));
        return;
      }
      hash.update(`${relative(this.#root, path)}\0${stats.size}\0${stats.mtimeMs}\n`);
    };
    add(manifest);
    for (const entry of files) add(join(this.#root, entry));
    return hash.digest('hex');
  }
}

/** SHA-256 (hex) and SHA-512 (SRI) of a file, in one read. */
function digestsOf(path: string): Promise<{ sha256: string; integrity: string; bytes: number }> {
  return new Promise((resolve, reject) => {
    const sha256 = createHash('sha256');
    const sha512 = createHash('sha512');
    let bytes = 0;
    createReadStream(path)
      .on('data', (chunk) => {
        sha256.update(chunk);
        sha512.update(chunk);
        bytes += chunk.length;
      })
      .on('error', reject)
      .on('end', () => resolve({ sha256: sha256.digest('hex'), integrity: `sha512-${sha512.digest('base64')}`, bytes }));
  });
}
