import { familyOf } from '../../../protocol/index.js';
import type { VerifiedGrant } from '../../auth/index.js';
import type { ModelRegistry } from '../../registry/index.js';
import { grantedModels } from '../image-jobs.js';

/**
 * The image models a grant may use, as A1111's checkpoints (`/sdapi/v1/sd-models`). A checkpoint's title is how clients
 * name it (SillyTavern's and Open WebUI's model lists show it and send it back as `sd_model_checkpoint`):
 * `<model> [<short hash>]`, as A1111 titles its files, the hash being the first ten hex digits of the version the name
 * runs now — so a model given a new version gets a new title, and an old title still finds the model by its name.
 */
export interface Checkpoint {
  title: string;
  /** The mesh's model (a model with versions by its family's name): what its jobs name. */
  model_name: string;
  hash: string;
  sha256: string;
  filename: string;
  config: null;
}

/** Every image model the grant may use, as a checkpoint, the mesh's default image model first. */
export function checkpointsFor(grant: VerifiedGrant, registry: ModelRegistry): Checkpoint[] {
  const models = grantedModels(grant, registry, 'image');
  const fallback = defaultImageModel(registry);
  const ordered = [...models.filter(({ name }) => name === fallback), ...models.filter(({ name }) => name !== fallback)];
  return ordered.map(({ name, model }) => {
    const sha256 = model.manifest.digest.replace(/^sha256:/, '');
    const hash = sha256.slice(0, 10);
    return { title: `${name} [${hash}]`, model_name: name, hash, sha256, filename: name, config: null };
  });
}

/** The mesh's default image model's name, when it has one. */
function defaultImageModel(registry: ModelRegistry): string | undefined {
  try {
    return familyOf(registry.resolve('image', undefined).manifest.name);
  } catch {
    return undefined;
  }
}

/**
 * The checkpoint a client names, as A1111 finds one among its aliases: by title, by model name, by short or full hash,
 * or by a title of another version (`<model> [<old hash>]`). Undefined when none of the grant's is meant.
 */
export function findCheckpoint(checkpoints: readonly Checkpoint[], name: string): Checkpoint | undefined {
  const wanted = name.trim();
  const byName = /^(.*?)\s*\[[0-9a-f]{8,64}\]$/.exec(wanted)?.[1];
  return checkpoints.find((checkpoint) => checkpoint.title === wanted)
    ?? checkpoints.find((checkpoint) => [checkpoint.model_name, checkpoint.hash, checkpoint.sha256].includes(wanted) || checkpoint.model_name === byName);
}
