import { z } from 'zod';

/**
 * Whole ComfyUI workflows as jobs (`workflow`), and what a host's ComfyUI offers them (its catalogue): the shapes both
 * sides share. A workflow is ComfyUI's API format — `{ "<node id>": { class_type, inputs } }`, an input a value or a
 * link `["<node id>", <output slot>]` — as ComfyUI's own `POST /prompt` takes it; the orchestrator checks its shape and
 * bounds, the host's ComfyUI checks the rest as it always does.
 */
export const WORKFLOW_LIMITS = {
  /** Nodes in one workflow (ComfyUI's largest shared workflows have a few hundred). */
  nodes: 2000,
  /** A node id (`"9"`, `"12:3"` in a subgraph). */
  nodeIdChars: 64,
  /** A node class (`KSampler`) or an input's name. */
  nameChars: 200,
  /** Inputs of one node. */
  inputsPerNode: 256,
  /** Pictures one workflow names (uploaded through the door, or by digest). */
  pictures: 16,
  /** A prompt id or a client id, as a client chose it. */
  idChars: 200,
  /** `extra_data` kept with a prompt (as JSON); a larger one is kept as `{}`. */
  extraDataChars: 16 * 1024,
} as const;

/** What a host's catalogue may hold at most (`catalogue` on the agent link); the agent trims before it sends. */
export const CATALOGUE_LIMITS = {
  /** Node classes: ComfyUI with many custom node packs has a few thousand. */
  classes: 10_000,
  /** Inputs of one class, required and optional together. */
  inputs: 512,
  /** Choices of one combo input (checkpoints, LoRAs, input files). */
  choices: 20_000,
  /** A text in it (a choice, a category, a description). */
  textChars: 2000,
  /** The catalogue as JSON, at most: what the agent sends whole; beyond it only the combos are kept, or nothing. */
  bytes: 768 * 1024,
} as const;

const NodeId = z.string().min(1).max(WORKFLOW_LIMITS.nodeIdChars);
const Name = z.string().min(1).max(WORKFLOW_LIMITS.nameChars);

/** One node of an API-format workflow. Other keys ComfyUI writes (`_meta` with the node's title) are kept. */
export const WorkflowNode = z.looseObject({
  class_type: Name,
  inputs: z.record(Name, z.unknown()).refine((inputs) => Object.keys(inputs).length <= WORKFLOW_LIMITS.inputsPerNode, `a node has at most ${WORKFLOW_LIMITS.inputsPerNode} inputs`),
});
export type WorkflowNode = z.infer<typeof WorkflowNode>;

/** An API-format workflow: `{ "<node id>": { class_type, inputs } }`, one node at least. */
export const Workflow = z.record(NodeId, WorkflowNode).superRefine((workflow, context) => {
  const count = Object.keys(workflow).length;
  if (count === 0) context.addIssue({ code: 'custom', message: 'a workflow has one node at least' });
  if (count > WORKFLOW_LIMITS.nodes) context.addIssue({ code: 'custom', message: `a workflow has at most ${WORKFLOW_LIMITS.nodes} nodes (this one has ${count})` });
});
export type Workflow = Record<string, WorkflowNode>;

/** A picture a workflow names, by digest: the name its nodes give it (a LoadImage's `image`) → the stored blob. */
const PictureName = z.string().min(1).max(WORKFLOW_LIMITS.nameChars);
const Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/, 'must be a blob digest, sha256:<64 hex>');

/**
 * A `workflow` job's input. The host's ComfyUI runs `workflow`; each picture in `pictures` is uploaded to it under a
 * name of the job's own and every input value equal to its name here is rewritten to that upload (so a workflow may
 * say `"image": "photo.png"` and name the stored file here). `previews` asks for pictures of the work so far (as an
 * image job's). The rest is the front door's bookkeeping, for its answers (`/history`, `/ws`): the prompt id and
 * client id a ComfyUI client chose, and its `extra_data`; the host never sees them used.
 */
export const WorkflowInput = z.strictObject({
  workflow: Workflow,
  pictures: z.record(PictureName, Digest).refine((pictures) => Object.keys(pictures).length <= WORKFLOW_LIMITS.pictures, `at most ${WORKFLOW_LIMITS.pictures} pictures`).optional(),
  previews: z.int().min(0).max(3).optional(),
  promptId: z.string().min(1).max(WORKFLOW_LIMITS.idChars).optional(),
  clientId: z.string().min(1).max(WORKFLOW_LIMITS.idChars).optional(),
  extraData: z.record(z.string(), z.unknown()).optional(),
});
export type WorkflowInput = z.infer<typeof WorkflowInput>;

/** Whether an input value is a link to another node's output (`["4", 0]`) rather than a value. */
export const isLink = (value: unknown): value is [string, number] =>
  Array.isArray(value) && value.length === 2 && typeof value[0] === 'string' && Number.isInteger(value[1]);

/**
 * The name the front door gives a picture a client uploads (`/upload/image`): its digest's hex and its format, so a
 * workflow that names it names the stored bytes, and nothing needs remembering between the upload and the prompt.
 */
export const DOOR_PICTURE_NAME = /^([0-9a-f]{64})\.(png|jpg|webp)$/;
const EXTENSIONS: Record<string, string> = { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/webp': 'webp' };

/** A stored picture's door name (`<hex>.png`); null for a media type the door does not hand out. */
export function doorPictureName(digest: string, mediaType: string): string | null {
  const extension = EXTENSIONS[mediaType];
  return extension ? `${digest.slice('sha256:'.length)}.${extension}` : null;
}

/**
 * The digest a workflow value names as a door picture: `<hex>.png`, under any subfolder (`clipspace/<hex>.png`), with
 * ComfyUI's folder annotation (`<hex>.png [input]`) or without; null for any other value.
 */
export function doorPictureDigest(value: unknown): string | null {
  if (typeof value !== 'string' || value.length > WORKFLOW_LIMITS.nameChars) return null;
  const file = value.replace(/ \[(input|output|temp)\]$/, '').split('/').at(-1)!;
  const match = DOOR_PICTURE_NAME.exec(file);
  return match ? `sha256:${match[1]}` : null;
}

// ---- catalogues --------------------------------------------------------------------------------------------------

const Text = z.string().max(CATALOGUE_LIMITS.textChars);
const Scalar = z.union([Text, z.number(), z.boolean()]);
const Choices = z.array(Scalar).max(CATALOGUE_LIMITS.choices);
/** An input's options (`default`, `min`, `max`, `options` of a COMBO…): scalars and lists of them only. */
const InputOptions = z.record(z.string().max(100), z.union([Scalar, z.null(), Choices]));
/** An input as `/object_info` gives it: `[type or choices, options?]`. */
const InputSpec = z.tuple([z.union([z.string().max(WORKFLOW_LIMITS.nameChars), Choices]), InputOptions.optional()]);
const InputSpecs = z.record(z.string().max(WORKFLOW_LIMITS.nameChars), InputSpec);

/** One node class as ComfyUI's `/object_info` describes it, the fields clients read (others are left out). */
export const NodeClassInfo = z.object({
  input: z.object({ required: InputSpecs.optional(), optional: InputSpecs.optional() }),
  input_order: z.object({ required: z.array(Text).max(CATALOGUE_LIMITS.inputs).optional(), optional: z.array(Text).max(CATALOGUE_LIMITS.inputs).optional() }).optional(),
  output: z.array(Text).max(256),
  output_is_list: z.array(z.boolean()).max(256).optional(),
  output_name: z.array(Text).max(256).optional(),
  name: Text,
  display_name: Text.optional(),
  description: Text.optional(),
  python_module: Text.optional(),
  category: Text.optional(),
  output_node: z.boolean().optional(),
  deprecated: z.boolean().optional(),
  experimental: z.boolean().optional(),
});
export type NodeClassInfo = z.infer<typeof NodeClassInfo>;

/** What a host's ComfyUI offers: `/object_info`, by node class. */
export const NodeCatalogue = z.record(z.string().min(1).max(WORKFLOW_LIMITS.nameChars), NodeClassInfo)
  .refine((catalogue) => Object.keys(catalogue).length <= CATALOGUE_LIMITS.classes, `at most ${CATALOGUE_LIMITS.classes} node classes`);
export type NodeCatalogue = z.infer<typeof NodeCatalogue>;

/**
 * The choices of a combo input (a checkpoint's name, a sampler, an input file), in either of ComfyUI's forms: the
 * list as the spec's type (`[["a.safetensors", …], {…}]`) or `["COMBO", {options: […]}]`; null for any other input.
 */
export function comboChoices(spec: unknown): readonly (string | number | boolean)[] | null {
  if (!Array.isArray(spec)) return null;
  if (Array.isArray(spec[0])) return spec[0] as (string | number | boolean)[];
  const options = spec[1] as { options?: unknown } | undefined;
  if (spec[0] === 'COMBO' && Array.isArray(options?.options)) return options.options as (string | number | boolean)[];
  return null;
}

/** Each class's combo inputs and their choices, for checking workflows against a catalogue quickly. */
export type CatalogueIndex = ReadonlyMap<string, { combos: ReadonlyMap<string, ReadonlySet<string>>; outputNode: boolean }>;

export function indexCatalogue(catalogue: NodeCatalogue): CatalogueIndex {
  const index = new Map<string, { combos: Map<string, Set<string>>; outputNode: boolean }>();
  for (const [name, info] of Object.entries(catalogue)) {
    const combos = new Map<string, Set<string>>();
    for (const specs of [info.input.required, info.input.optional]) {
      for (const [input, spec] of Object.entries(specs ?? {})) {
        const choices = comboChoices(spec);
        if (choices) combos.set(input, new Set(choices.map(String)));
      }
    }
    index.set(name, { combos, outputNode: info.output_node === true });
  }
  return index;
}

/** Why a workflow cannot run on a catalogue's ComfyUI: a node class it lacks, or a value not among a combo's choices. */
export type WorkflowMisfit =
  | { kind: 'missing_class'; node: string; classType: string }
  | { kind: 'value_not_in_list'; node: string; classType: string; input: string; value: string; choices: readonly string[] };

/**
 * What a workflow needs of a ComfyUI that `index` describes, and it lacks: every node's class, and every value of a
 * combo input among its choices — save the pictures the job brings (`pictures`: names it uploads under its own), and
 * links. Empty: it fits.
 */
export function misfits(workflow: Workflow, index: CatalogueIndex, pictures: ReadonlySet<string> = new Set()): WorkflowMisfit[] {
  const found: WorkflowMisfit[] = [];
  for (const [node, { class_type: classType, inputs }] of Object.entries(workflow)) {
    const known = index.get(classType);
    if (!known) {
      found.push({ kind: 'missing_class', node, classType });
      continue;
    }
    for (const [input, value] of Object.entries(inputs)) {
      const choices = known.combos.get(input);
      if (!choices || isLink(value) || (typeof value !== 'string' && typeof value !== 'number') || pictures.has(String(value))) continue;
      if (!choices.has(String(value))) found.push({ kind: 'value_not_in_list', node, classType, input, value: String(value), choices: [...choices].slice(0, 20) });
    }
  }
  return found;
}

/** A misfit in words: `node 4 (CheckpointLoaderSimple): ckpt_name "x.safetensors" is not among its choices`. */
export function describeMisfit(misfit: WorkflowMisfit): string {
  if (misfit.kind === 'missing_class') return `node ${misfit.node}: class ${misfit.classType} is on no host's ComfyUI`;
  return `node ${misfit.node} (${misfit.classType}): ${misfit.input} "${misfit.value.slice(0, 200)}" is not among its choices`;
}

/** A link to a node the workflow does not have: `node`'s `input` names `target`. */
export interface BrokenLink {
  node: string;
  classType: string;
  input: string;
  target: string;
}

/** The links that name no node of the workflow (ComfyUI refuses them as `bad_linked_input`). */
export function brokenLinks(workflow: Workflow): BrokenLink[] {
  const broken: BrokenLink[] = [];
  for (const [node, { class_type: classType, inputs }] of Object.entries(workflow)) {
    for (const [input, value] of Object.entries(inputs)) {
      if (isLink(value) && !Object.hasOwn(workflow, value[0])) broken.push({ node, classType, input, target: value[0] });
    }
  }
  return broken;
}
