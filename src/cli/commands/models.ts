import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import { table } from '../common/output.js';

export function modelsCommand(): Command {
  const models = new Command('models').description('The built-in models');
  models.command('build')
    .description('Build the built-in ONNX models (deterministic: the same digests on every machine)')
    .option('-o, --out <dir>', 'where to write them', 'models')
    .action(async (options: { out: string }) => {
      const { builtinModels } = await import('../../models/index.js');
      const dir = resolve(options.out);
      mkdirSync(dir, { recursive: true });
      const rows = builtinModels().map((model) => {
        const path = join(dir, `${model.name}.onnx`);
        writeFileSync(path, model.bytes);
        return [model.name, model.jobTypes.join(','), `${model.bytes.length}`, model.digest, path];
      });
      process.stdout.write(`${table(['MODEL', 'TYPES', 'BYTES', 'DIGEST', 'FILE'], rows)}\n`);
    });
  return models;
}
