import { createHash } from 'node:crypto';
import { engineDescriptor } from '../../protocol/engines/index.js';
import type { ModelEntry } from './config.js';
import { JOB_INPUTS, jobInputsFor } from '../job-inputs/job-inputs.js';

/**
 * Models declared in mesh.yaml. The engines' settings schemas are in their
 * descriptors (protocol/engines/), which agents load models with too: the
 * orchestrator checks a declared model's settings with the schema its engine
 * will load it with, so a bad field is named when the mesh starts rather than
 * at the first job.
 */

/** A model declared in mesh.yaml, checked, with its defaults. */
export interface ModelDefinition {
  name: string;
  engine: string;
  version: string;
  types: string[];
  memoryMB: number;
  params: Record<string, number | string>;
  /** As written: agents validate them again with their engine's schema (and its defaults) at load. */
  settings: Record<string, unknown>;
  /** An absolute path or an http(s) URL on the orchestrator's host; null: no file. */
  file: string | null;
  /** The file's expected digest (`sha256:<hex>`), or null. */
  sha256: string | null;
}

/** The fields only a declaration (an entry with `engine`) may have. */
/** `version` without an engine pins the version a model added at run time runs when a job names only the model. */
const DEFINITION_FIELDS = ['types', 'memoryMB', 'file', 'sha256', 'params', 'settings'] as const;

const DEFAULT_MEMORY_MB = 1024;

/** `settings.a.b[0]` for a zod issue's path. */
const settingsPath = (path: readonly PropertyKey[]): string =>
  `settings${path.map((key) => (typeof key === 'number' ? `[${key}]` : `.${String(key)}`)).join('')}`;

/**
 * What is wrong with the `models:` entries, one line per problem, each naming
 * its field (`models.sd15.settings.command: …`). The shapes are zod's; this
 * checks what the shapes cannot: definition fields without an engine, job
 * types without input handling or routing, the engine's own settings schema
 * (without its host settings when the entry gives none: the hosts that declare
 * the model give them), an engine that loads a file declared without one. An engine this orchestrator does not
 * know is not an error: agents that run it will serve the model (see
 * `unknownEngines`). `typesField` names an entry's job types as its file wrote them (`types`, or the former `jobTypes`).
 */
export function checkModelEntries(
  models: Readonly<Record<string, ModelEntry>>, routing: Readonly<Record<string, readonly string[]>>, typesField: (model: string) => string = () => 'types',
): string[] {
  const problems: string[] = [];
  for (const [name, entry] of Object.entries(models)) {
    const at = `models.${name}`;
    if (entry.engine === undefined) {
      for (const field of DEFINITION_FIELDS) {
        const written = field === 'types' ? typesField(name) : field;
        if (entry[field] !== undefined) {
          problems.push(`${at}.${written}: only a model declared with an engine has ${written}; without ${at}.engine this entry sets the policy of an existing model`);
        }
      }
      continue;
    }
    const types = `${at}.${typesField(name)}`;
    if (!entry.types) {
      problems.push(`${types}: required: the job types the model serves (e.g. [image])`);
    } else {
      const handlings = new Set(entry.types.map((type) => jobInputsFor(type)));
      for (const type of entry.types) {
        if (!jobInputsFor(type)) problems.push(`${types}: job type "${type}" has no input handling in this orchestrator (it has: ${Object.keys(JOB_INPUTS).join(', ')})`);
        else if (!routing[type]) problems.push(`${types}: job type "${type}" has no routing entry`);
      }
      if (handlings.size > 1 && !handlings.has(undefined)) problems.push(`${types}: ${entry.types.join(' and ')} take different inputs; one model serves job types of one input kind`);
    }
    const module = engineDescriptor(entry.engine);
    if (!module) continue;
    const settings = entry.settings ?? {};
    // Host settings here (a command, a server's URL) are this machine's own agent's (`gpumesh up`): checked whole. A
    // model declared without them is run by the hosts whose own config declares it (host.yaml), which check the rest.
    const schema = module.hostSettingsOf(settings).length > 0 ? module.settings : module.meshSettings ?? module.settings;
    const parsed = schema.safeParse(settings);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) problems.push(`${at}.${settingsPath(issue.path)}: ${issue.message}`);
    }
    if (module.needsFile && entry.file === undefined) problems.push(`${at}.file: the ${entry.engine} engine loads a model file: give its path or URL`);
    if (entry.sha256 !== undefined && entry.file === undefined) problems.push(`${at}.sha256: a digest without a file; add ${at}.file`);
  }
  return problems;
}

/** The declarations among the `models:` entries (those with `engine`), with their defaults. Call after `checkModelEntries`. */
export function modelDefinitions(models: Readonly<Record<string, ModelEntry>>): ModelDefinition[] {
  return Object.entries(models).flatMap(([name, entry]) => (entry.engine === undefined ? [] : [{
    name, engine: entry.engine, version: entry.version ?? '1', types: [...(entry.types ?? [])],
    memoryMB: entry.memoryMB ?? DEFAULT_MEMORY_MB, params: { ...entry.params }, settings: { ...entry.settings },
    file: entry.file ?? null, sha256: entry.sha256 === undefined ? null : entry.sha256.startsWith('sha256:') ? entry.sha256 : `sha256:${entry.sha256}`,
  }]));
}

/** Declared models whose engine this orchestrator does not know: only agents that list the engine in their hello get them. */
export function unknownEngines(definitions: readonly ModelDefinition[]): ModelDefinition[] {
  return definitions.filter((definition) => !engineDescriptor(definition.engine));
}

/** JSON with object keys sorted, so the same definition always hashes the same. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonical((value as Record<string, unknown>)[key])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * The identity of a model without a file: the digest of what defines it (engine, version, job types, params,
 * settings). A changed definition is a new version, which an agent holding the old one loads afresh.
 */
export function definitionDigest(definition: ModelDefinition): string {
  const { name, engine, version, types, params, settings } = definition;
  // Hashed under the key it had when digests were first made (`jobTypes`): a renamed key would make every declared
  // model a new version, loaded afresh by every host.
  return `sha256:${createHash('sha256').update(canonical({ name, engine, version, jobTypes: types, params, settings })).digest('hex')}`;
}
