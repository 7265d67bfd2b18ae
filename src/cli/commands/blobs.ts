import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { Command } from 'commander';
import type { ForgottenBlob } from '../../protocol/api/index.js';
import { DIGEST_PATTERN } from '../../protocol/index.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { CliError, printJson } from '../common/output.js';
import { uploadFile, uploadPicture } from '../common/upload.js';
import { askEach, withClientOptions } from './shared.js';

/**
 * `gpumesh blobs put|rm`: files stored by digest for jobs to name (`"image": "sha256:…"`), and deleting them again.
 * What a grant lineage stored only that lineage may delete; the bytes go once nothing else names them.
 */
export function blobsCommand(): Command {
  const blobs = new Command('blobs').description('Store files by digest for jobs to name, and delete them');
  withClientOptions(blobs.command('put <file...>'))
    .description('Store files by digest (a picture is checked as a job\'s input is) and print each digest, for a job input such as {"image": "sha256:…"}')
    .option('--json', 'print JSON, one answer per file')
    .action(async (files: string[], options: ClientOptions & { json?: boolean }) => {
      const client = clientFrom(options);
      const stored = [];
      for (const file of files) {
        try {
          // A picture goes with its name, so that a name that says another type is refused; other files as they are.
          stored.push({ file, ...(/\.(png|jpe?g|webp)$/i.test(file) ? await uploadPicture(client, file) : await uploadFile(client, file)) });
        } catch (error) {
          throw new CliError(`${file}: ${(error as Error).message}`);
        }
      }
      if (options.json) return printJson(stored);
      for (const { file, digest, bytes, deduplicated } of stored) process.stdout.write(`${digest}  ${file} (${bytes.toLocaleString('en')} bytes${deduplicated ? ', stored already' : ''})\n`);
    });
  askEach(
    withClientOptions(blobs.command('rm <digest-or-file...>'))
      .description('Delete files this grant stored, by digest or by a local copy of the file; the bytes go once nothing else names them'),
    'file', async (client, item) => client.request<ForgottenBlob>('DELETE', `/v1/blobs/${await digestOf(item)}`),
    ({ digest, freed, freedBytes }) => `${digest} deleted, ${freed ? `${freedBytes.toLocaleString('en')} bytes freed` : 'its bytes kept: something else names them (a job that took it as input, another grant\'s copy, a result)'}`,
  );
  return blobs;
}

/** A digest as given, or the digest of a local file's bytes. */
async function digestOf(item: string): Promise<string> {
  if (DIGEST_PATTERN.test(item)) return item;
  try {
    if (!(await stat(item)).isFile()) throw new Error('not a file');
  } catch (error) {
    throw new CliError(`${item}: not a digest (sha256:<64 hex>) nor a file that can be read (${(error as Error).message})`);
  }
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(item)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest('hex')}`;
}
