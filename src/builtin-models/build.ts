/**
 * Writes the built-in models as ONNX files:
 *
 *   node dist/builtin-models/build.js --out <dir>
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { builtinModels } from './builtin.js';

const { values } = parseArgs({ options: { out: { type: 'string', short: 'o' } } });
if (values.out === undefined) {
  process.stderr.write('usage: node dist/builtin-models/build.js --out <dir>\n');
  process.exit(2);
}
mkdirSync(values.out, { recursive: true });
for (const model of builtinModels()) {
  const file = join(values.out, `${model.name}.onnx`);
  writeFileSync(file, model.bytes);
  process.stdout.write(`${model.name}\t${model.bytes.byteLength} bytes\t${model.digest}\t${file}\n`);
}
