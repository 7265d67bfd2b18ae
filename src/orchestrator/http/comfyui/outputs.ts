import { z } from 'zod';
import type { JobView } from '../../../protocol/api/index.js';
import type { Workflow, WorkflowInput } from '../../../protocol/index.js';
import { servedAs } from '../../blobs/output-media.js';

/** One file as ComfyUI's history and `executed` messages name it (what `/view` takes back). */
export interface ComfyFile {
  filename: string;
  subfolder: string;
  type: 'output' | 'temp' | 'input';
}

/** A node's outputs: its files, under `images` as ComfyUI lists every file, `animated` where they are clips. */
export interface NodeOutput {
  images: ComfyFile[];
  animated?: boolean[];
}

/**
 * The name the door gives a stored file in its answers: the digest's hex and the extension of its type
 * (`<64 hex>.png`). `/view` reads the digest back from it, so no name needs remembering — and it needs no escaping in a
 * URL, which clients that build `/view` URLs without encoding (SillyTavern) rely on.
 */
export const fileNameOf = (digest: string, mediaType: string): string => `${digest.slice('sha256:'.length)}.${servedAs(mediaType).extension}`;

/** The digest a `/view` file name names; null for a name the door never gave. */
export function digestOfFileName(filename: string): string | null {
  const match = /^([0-9a-f]{64})\.[a-z0-9]{1,5}$/.exec(filename);
  return match ? `sha256:${match[1]}` : null;
}

/** What the agent's ComfyUI batch says of a workflow job's files, beside them: which node made each (by digest). */
const MadeBy = z.object({ outputs: z.array(z.object({ node: z.string().max(64), type: z.string().max(20), digest: z.string().max(80) })).max(256) });

/**
 * A finished workflow job's files by the node that made each, as `/history` and `executed` give them. A file whose
 * node the job's result does not name (a result of another kind) goes under the workflow's last node.
 */
export function outputsOf(view: Pick<JobView, 'artifacts' | 'result' | 'input'>): Record<string, NodeOutput> {
  const made = MadeBy.safeParse(view.result);
  const byDigest = new Map((made.success ? made.data.outputs : []).map((entry) => [entry.digest, entry]));
  const fallback = Object.keys((view.input.workflow ?? {}) as Workflow).at(-1) ?? '0';
  const outputs: Record<string, NodeOutput> = {};
  for (const artifact of view.artifacts) {
    const entry = byDigest.get(artifact.digest);
    const node = entry?.node ?? fallback;
    const output = outputs[node] ??= { images: [] };
    output.images.push({ filename: fileNameOf(artifact.digest, artifact.mediaType), subfolder: '', type: entry?.type === 'temp' ? 'temp' : 'output' });
    if (artifact.mediaType.startsWith('video/')) output.animated = [true];
  }
  return outputs;
}

/** Where a failed workflow job failed, read from its error as the agent words it (`node 9 (SaveImage) failed: …`). */
export function failedNode(message: string): { node: string | null; type: string | null } {
  const match = /\bnode (\S+) \(([^)]+)\) failed: /.exec(message);
  return { node: match?.[1] ?? null, type: match?.[2] ?? null };
}

/** A workflow job's prompt id (the client's, or the one the door chose), its client and its `extra_data`, from its input. */
export function promptFields(input: Record<string, unknown>): { promptId: string | null; clientId: string | null; extraData: Record<string, unknown> } {
  const { promptId, clientId, extraData } = input as Partial<WorkflowInput>;
  return {
    promptId: promptId ?? null, clientId: clientId ?? null,
    // ComfyUI keeps the client's id in extra_data, and clients read it there.
    extraData: { ...(extraData ?? {}), ...(clientId ? { client_id: clientId } : {}) },
  };
}
