import type { Logger } from 'pino';
import { CATALOGUE_LIMITS, comboChoices, NodeCatalogue } from '../../../protocol/index.js';
import { summaryOf } from '../kit/server-error.js';
import type { ComfyClient } from './client.js';

/** The fields of a node class clients read, as ComfyUI's `/object_info` names them; the rest (tooltips…) is left out. */
const CLASS_FIELDS = ['output', 'output_is_list', 'output_name', 'name', 'display_name', 'description', 'python_module', 'category', 'output_node', 'deprecated', 'experimental'] as const;

const isScalar = (value: unknown): value is string | number | boolean => typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean';
const text = (value: string): string => value.slice(0, CATALOGUE_LIMITS.textChars);

/** A list of scalars, bounded; null when it is not one. */
function choicesOf(value: unknown): (string | number | boolean)[] | null {
  if (!Array.isArray(value) || !value.every(isScalar)) return null;
  return value.slice(0, CATALOGUE_LIMITS.choices).map((item) => (typeof item === 'string' ? text(item) : item));
}

/** An input's options, only scalars and lists of them (a tooltip is words for a person, and long). */
function optionsOf(value: unknown): Record<string, unknown> | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const kept: Record<string, unknown> = {};
  for (const [key, option] of Object.entries(value).slice(0, 64)) {
    if (key === 'tooltip' || key.length > 100) continue;
    if (option === null || isScalar(option)) kept[key] = typeof option === 'string' ? text(option) : option;
    else if (choicesOf(option)) kept[key] = choicesOf(option);
  }
  return kept;
}

/** One input spec, `[type or choices, options?]`, trimmed to what the link carries; null to leave it out. */
function specOf(value: unknown, combosOnly: boolean): unknown[] | null {
  if (!Array.isArray(value) || value.length === 0) return null;
  const combo = comboChoices(value) !== null;
  if (combosOnly && !combo) return null;
  const head = typeof value[0] === 'string' ? value[0].slice(0, 200) : choicesOf(value[0]);
  if (head === null) return null;
  const options = optionsOf(value[1]);
  return options === undefined ? [head] : [head, options];
}

/**
 * A ComfyUI's `/object_info` as the agent reports it: each class's inputs (their types, limits and combo choices),
 * outputs and descriptions, without tooltips or other nested values; `combosOnly`: only what routing needs (classes,
 * combo inputs, whether a class is an output). Checked with the link's own schema, so what is sent is what the
 * orchestrator accepts.
 */
export function trimCatalogue(raw: unknown, combosOnly = false): NodeCatalogue | null {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return null;
  const catalogue: Record<string, unknown> = {};
  for (const [name, info] of Object.entries(raw).slice(0, CATALOGUE_LIMITS.classes)) {
    if (name.length === 0 || name.length > 200 || info === null || typeof info !== 'object') continue;
    const source = info as Record<string, unknown>;
    const input: Record<string, Record<string, unknown[]>> = {};
    for (const group of ['required', 'optional'] as const) {
      const specs = (source.input as Record<string, unknown> | undefined)?.[group];
      if (specs === null || typeof specs !== 'object') continue;
      const kept: Record<string, unknown[]> = {};
      for (const [inputName, spec] of Object.entries(specs).slice(0, CATALOGUE_LIMITS.inputs)) {
        const trimmed = inputName.length <= 200 ? specOf(spec, combosOnly) : null;
        if (trimmed) kept[inputName] = trimmed;
      }
      input[group] = kept;
    }
    const entry: Record<string, unknown> = { input, output: [], name: name };
    for (const field of combosOnly ? ['output_node'] as const : CLASS_FIELDS) {
      const value = source[field];
      if (isScalar(value)) entry[field] = typeof value === 'string' ? text(value) : value;
      else if (Array.isArray(value)) entry[field] = value.slice(0, 256).filter(isScalar).map((item) => (typeof item === 'string' ? text(item) : item));
    }
    catalogue[name] = entry;
  }
  const parsed = NodeCatalogue.safeParse(catalogue);
  return parsed.success ? parsed.data : null;
}

/**
 * What a ComfyUI offers clients' workflows, for the agent to report: its `/object_info` trimmed to the link's bounds —
 * whole when it fits CATALOGUE_LIMITS.bytes, else its combos only (what routing needs), else null (the mesh then sends
 * it any workflow, and ComfyUI's own validation refuses what it lacks). Null too when the server does not answer.
 */
export async function fetchCatalogue(client: ComfyClient, log: Logger): Promise<NodeCatalogue | null> {
  let raw: unknown;
  try {
    raw = await client.objectInfo();
  } catch (error) {
    log.warn({ server: client.url, err: summaryOf(error) }, 'ComfyUI did not answer /object_info; the mesh will not know its nodes until it does');
    return null;
  }
  for (const combosOnly of [false, true]) {
    const catalogue = trimCatalogue(raw, combosOnly);
    if (catalogue && JSON.stringify(catalogue).length <= CATALOGUE_LIMITS.bytes) return catalogue;
  }
  log.warn({ server: client.url, limit: CATALOGUE_LIMITS.bytes }, 'ComfyUI\'s /object_info is too large to report, even trimmed; the mesh routes its workflows without it');
  return null;
}
