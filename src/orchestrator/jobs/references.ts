import { INPUT_IMAGE_FIELDS, JobReference, LIMITS, MeshError, type InputImageField } from '../../protocol/index.js';

/** One picture field of an input that takes another job's output (`{ fromJob, output }`) instead of a digest. */
export interface InputReference {
  field: InputImageField;
  fromJob: string;
  output: number;
  artifact?: string;
}

/**
 * What a reference stands for while its job is checked at admission: a digest no blob has, so the job's input
 * handling sees a picture field filled (image-to-image's defaults) and nothing is fetched for it.
 */
export const REFERENCE_STAND_IN = `sha256:${'0'.repeat(64)}`;

/** The media types a picture field may take from a source (what the agent decodes). */
const PICTURE_TYPES: ReadonlySet<string> = new Set(LIMITS.inputImage.formats.map((format) => `image/${format}`));

/** Whether an input names another job's output anywhere (the one check jobs without references pay). */
export function hasReference(input: Record<string, unknown>): boolean {
  for (const field of INPUT_IMAGE_FIELDS) {
    const value = input[field];
    if (value !== null && typeof value === 'object') return true;
  }
  return false;
}

/**
 * The references an input holds, checked: a picture field holding an object must be a reference of exactly the
 * documented shape, else BAD_REFERENCE naming the field (`where`: how the field is named to the client).
 */
export function referencesIn(input: Record<string, unknown>, where = 'input'): InputReference[] {
  const references: InputReference[] = [];
  for (const field of INPUT_IMAGE_FIELDS) {
    const value = input[field];
    if (value === null || typeof value !== 'object') continue;
    const parsed = JobReference.safeParse(value);
    if (!parsed.success) {
      const detail = parsed.error.issues.map((issue) => `${[field, ...issue.path].join('.')}: ${issue.message}`).join('; ');
      throw new MeshError('BAD_REFERENCE', { field: `${where}.${field}`, detail: `${detail} (a reference is { "fromJob": "j_…", "output": 0 })` });
    }
    references.push({ field, ...parsed.data });
  }
  return references;
}

/** The jobs an input's references name, each once (an input that is not an object names none). */
export function sourcesOf(input: Record<string, unknown>): string[] {
  const sources = new Set<string>();
  for (const field of INPUT_IMAGE_FIELDS) {
    const value = input[field] as { fromJob?: unknown } | null | undefined;
    if (value !== null && typeof value === 'object' && typeof value.fromJob === 'string') sources.add(value.fromJob);
  }
  return [...sources];
}

/** The input as its job's input handling checks it: each reference replaced by the stand-in digest. */
export function withStandIns(input: Record<string, unknown>, references: readonly InputReference[]): Record<string, unknown> {
  if (references.length === 0) return input;
  const copy = { ...input };
  for (const reference of references) copy[reference.field] = REFERENCE_STAND_IN;
  return copy;
}

/** A normalized input with its references put back where the stand-ins are (what a waiting job stores). */
export function withReferences(input: Record<string, unknown>, references: readonly InputReference[]): Record<string, unknown> {
  const copy = { ...input };
  for (const { field, fromJob, output, artifact } of references) copy[field] = artifact === undefined ? { fromJob, output } : { fromJob, output, artifact };
  return copy;
}

/**
 * The output a reference takes from its source's outputs (in the order the source's view lists them): the digest, or
 * why none fits — there is no such output, or it is not a picture the field can start from.
 */
export function pickOutput(
  outputs: readonly { digest: string; mediaType: string }[], reference: InputReference,
): { digest: string } | { refusal: string } {
  const among = reference.artifact === undefined ? outputs : outputs.filter((output) => output.mediaType === reference.artifact);
  const named = reference.artifact === undefined ? '' : ` of type ${reference.artifact}`;
  const chosen = among[reference.output];
  if (!chosen) return { refusal: `job ${reference.fromJob} has ${among.length} output${among.length === 1 ? '' : 's'}${named}, so there is no output ${reference.output}` };
  if (!PICTURE_TYPES.has(chosen.mediaType)) {
    return { refusal: `output ${reference.output}${named} of job ${reference.fromJob} is ${chosen.mediaType}, not a picture (${[...PICTURE_TYPES].join(', ')}); name a picture output, e.g. "artifact": "image/png"` };
  }
  return { digest: chosen.digest };
}
