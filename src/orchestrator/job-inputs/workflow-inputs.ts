import { createHash } from 'node:crypto';
import { brokenLinks, INPUT_SCHEMAS, MeshError, WORKFLOW_LIMITS, type Workflow } from '../../protocol/index.js';
import type { JobInputs } from './job-inputs.js';
import { parseInput } from './parse-input.js';

/** The pixels a workflow's work is assumed at when it names no size (a 512 × 512 latent). */
const DEFAULT_PIXELS = 512 * 512;

/** Whether some node input of the workflow holds exactly this value (a picture's name must be used to be sent). */
function named(workflow: Workflow, value: string): boolean {
  for (const node of Object.values(workflow)) {
    for (const input of Object.values(node.inputs)) if (input === value) return true;
  }
  return false;
}

/**
 * A whole ComfyUI workflow (`workflow` jobs: protocol/workflows.ts), checked for its shape and bounds, its links and
 * its pictures; what its nodes are is for the host's ComfyUI to judge (and, where its catalogue is known, for routing:
 * routing/workflow-fit.ts). Nothing is filled in: the workflow runs as the client sent it.
 */
export const workflow: JobInputs = {
  normalize(input, manifest) {
    const parsed = parseInput(INPUT_SCHEMAS.workflow, input, manifest.name);
    const broken = brokenLinks(parsed.workflow)[0];
    if (broken) {
      throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: `workflow.${broken.node}.inputs.${broken.input}: links to node "${broken.target}", which the workflow does not have` });
    }
    for (const name of Object.keys(parsed.pictures ?? {})) {
      if (!named(parsed.workflow, name)) throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: `pictures.${name}: no node input of the workflow names "${name}"` });
    }
    if (parsed.extraData !== undefined && JSON.stringify(parsed.extraData).length > WORKFLOW_LIMITS.extraDataChars) {
      throw new MeshError('INVALID_INPUT', { model: manifest.name, detail: `extraData: more than ${WORKFLOW_LIMITS.extraDataChars} characters as JSON` });
    }
    return parsed;
  },
  // Jobs share a batch only when they ask the same of a host (the router looks at the batch's first job): the same graph.
  compatKey: (input) => createHash('sha256').update(JSON.stringify(input.workflow ?? null)).digest('base64url').slice(0, 16),
  // Sampling dominates a workflow's time: its samplers' steps, at the largest size it names.
  cost(input) {
    let steps = 0;
    let pixels = 0;
    for (const node of Object.values((input.workflow ?? {}) as Workflow)) {
      const { steps: nodeSteps, width, height } = node.inputs;
      if (Number.isInteger(nodeSteps)) steps += Number(nodeSteps);
      if (Number.isInteger(width) && Number.isInteger(height)) pixels = Math.max(pixels, Number(width) * Number(height));
    }
    return Math.max(1, steps) * (pixels || DEFAULT_PIXELS);
  },
  // An empty graph: the agent answers it by asking its ComfyUI whether it is up (engines/comfyui/batch.ts), since no
  // workflow is known to run on every ComfyUI.
  probeInput: () => ({ workflow: {} }),
};
