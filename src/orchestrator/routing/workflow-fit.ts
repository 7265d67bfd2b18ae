import {
  familyOf, indexCatalogue, MeshError, misfits, WorkflowInput, describeMisfit, type NodeCatalogue, type RouteSkipReason, type Workflow, type WorkflowMisfit,
} from '../../protocol/index.js';
import type { RegisteredModel } from '../registry/index.js';
import type { HostCatalogue, HostSession } from './host.js';
import type { HostRegistry } from './hosts.js';

/** What a workflow job asks of a host: its graph, and the picture names it brings (uploaded under its own names). */
export interface WorkflowNeeds {
  workflow: Workflow;
  pictures: ReadonlySet<string>;
}

/** A `workflow` job's needs, read from its (normalized) input; null for any other input. */
export function needsOf(input: Record<string, unknown>): WorkflowNeeds | null {
  if (input.workflow === null || typeof input.workflow !== 'object') return null;
  const pictures = input.pictures !== null && typeof input.pictures === 'object' ? Object.keys(input.pictures) : [];
  return { workflow: input.workflow as Workflow, pictures: new Set(pictures) };
}

/** A catalogue an agent reported, indexed once for the checks of every job routed there. */
export function hostCatalogue(nodes: NodeCatalogue | null): HostCatalogue | null {
  return nodes === null ? null : { nodes, index: indexCatalogue(nodes) };
}

/**
 * Why `host` cannot run this workflow of `model`: its owner did not let the model run clients' workflows there
 * (`no workflows`), or its ComfyUI lacks a node class or a combo value the workflow names (`missing nodes`); null when
 * it may (a ComfyUI whose catalogue is not known yet may: its own validation refuses what it lacks).
 */
export function workflowSkip(host: HostSession, model: RegisteredModel, needs: WorkflowNeeds): RouteSkipReason | null {
  const family = familyOf(model.manifest.name);
  if (!host.catalogues.has(family)) return 'no workflows';
  const catalogue = host.catalogues.get(family);
  return catalogue && misfits(needs.workflow, catalogue.index, needs.pictures).length > 0 ? 'missing nodes' : null;
}

/** Whether some host may run a workflow, or what the closest one lacks. */
export type Fit = { fits: true } | { fits: false; why: 'no host takes workflows'; hosts: number } | { fits: false; why: 'missing'; misfits: WorkflowMisfit[] };

/**
 * Which hosts could run a workflow, judged at submit from what their agents reported: a workflow no connected host
 * can run (none takes workflows for the model, or every one lacks a node or a model it names) is refused there and
 * then, in ComfyUI's words at the front door, rather than queued until its deadline. With no host of the model
 * connected at all it is queued: one may join.
 */
export class WorkflowFit {
  readonly #hosts: HostRegistry;

  constructor(hosts: HostRegistry) {
    this.#hosts = hosts;
  }

  /** Whether a connected host that could run `model` for these classes may run the workflow (see the class). */
  check(model: RegisteredModel, classes: readonly string[], needs: WorkflowNeeds): Fit {
    const family = familyOf(model.manifest.name);
    let candidates = 0;
    let closest: WorkflowMisfit[] | null = null;
    for (const host of this.#hosts) {
      if (!host.info.classes.some((name) => classes.includes(name)) || !host.info.engines.includes(model.manifest.engine) || !host.mayServe(model.manifest.name)) continue;
      candidates++;
      if (!host.catalogues.has(family)) continue;
      const catalogue = host.catalogues.get(family);
      if (!catalogue) return { fits: true };
      const found = misfits(needs.workflow, catalogue.index, needs.pictures);
      if (found.length === 0) return { fits: true };
      if (closest === null || found.length < closest.length) closest = found;
    }
    if (candidates === 0) return { fits: true };
    return closest === null ? { fits: false, why: 'no host takes workflows', hosts: candidates } : { fits: false, why: 'missing', misfits: closest };
  }

  /** At admission: WORKFLOW_UNSUPPORTED for a workflow job no connected host can run (the misfits in `params.misfits`). */
  admit(model: RegisteredModel, input: Record<string, unknown>, classes: readonly string[]): void {
    const needs = needsOf(input);
    if (!needs) return;
    const fit = this.check(model, classes, needs);
    if (fit.fits) return;
    const name = model.manifest.name;
    if (fit.why === 'no host takes workflows') {
      throw new MeshError('WORKFLOW_UNSUPPORTED', {
        model: name, misfits: [],
        detail: `none of its ${fit.hosts} connected host${fit.hosts === 1 ? '' : 's'} runs clients' workflows for it (its owner opts in with settings.acceptWorkflows in the host's own config)`,
      });
    }
    throw new MeshError('WORKFLOW_UNSUPPORTED', { model: name, misfits: fit.misfits, detail: fit.misfits.slice(0, 5).map(describeMisfit).join('; ') });
  }
}

/** The checked input of a `workflow` job (its schema's parse), for the places that read one in hand. */
export const parseWorkflowInput = (input: unknown): WorkflowInput | null => {
  const parsed = WorkflowInput.safeParse(input);
  return parsed.success ? parsed.data : null;
};
