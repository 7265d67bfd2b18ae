import { INPUT_IMAGE_FIELDS, LIMITS, MeshError, StepReference, type SubmitJobBody, type SubmitPipelineBody } from '../../protocol/index.js';

/** A pipeline checked whole: its steps in an order where each comes after the steps it takes outputs from. */
export interface PipelinePlan {
  /** Each step as the job it becomes, references to steps replaced by references to their jobs, in dependency order. */
  steps: { id: string; jobId: string; index: number; body: SubmitJobBody; after: string[] }[];
  /** The longest chain of steps that take one another's outputs (1: no step takes another's). */
  depth: number;
}

const invalid = (field: string, detail: string): MeshError => new MeshError('PIPELINE_INVALID', { field, detail });

/**
 * Check a pipeline's shape before anything of it is admitted: step names unique, every `fromStep` naming another step
 * of it, no cycle, the longest chain within `LIMITS.pipeline.depth` — each refusal a PIPELINE_INVALID naming the field
 * (`steps.2.input.image.fromStep`). `newJobId` gives each step its job's id, so later steps can name it before it exists.
 */
export function planPipeline(body: SubmitPipelineBody, newJobId: () => string): PipelinePlan {
  const { steps } = body;
  if (steps.length > LIMITS.pipeline.steps) throw invalid('steps', `${steps.length} steps; a pipeline has at most ${LIMITS.pipeline.steps}`);
  const indexOf = new Map<string, number>();
  steps.forEach((step, index) => {
    const earlier = indexOf.get(step.id);
    if (earlier !== undefined) throw invalid(`steps.${index}.id`, `"${step.id}" names steps.${earlier} already; each step needs its own name`);
    indexOf.set(step.id, index);
  });
  const jobIds = steps.map(() => newJobId());
  // Each step's references to other steps, by index, checked.
  const after = steps.map((step, index) => {
    const named: { field: string; target: number; reference: StepReference }[] = [];
    for (const field of INPUT_IMAGE_FIELDS) {
      const value = step.input[field];
      if (value === null || typeof value !== 'object' || !('fromStep' in value)) continue;
      const where = `steps.${index}.input.${field}`;
      const parsed = StepReference.safeParse(value);
      if (!parsed.success) throw invalid(where, parsed.error.issues.map((issue) => `${issue.path.join('.') || 'reference'}: ${issue.message}`).join('; '));
      const target = indexOf.get(parsed.data.fromStep);
      if (target === undefined) throw invalid(`${where}.fromStep`, `no step is named "${parsed.data.fromStep}" (steps: ${[...indexOf.keys()].join(', ')})`);
      if (target === index) throw invalid(`${where}.fromStep`, `step "${step.id}" cannot take its own output`);
      named.push({ field, target, reference: parsed.data });
    }
    return named;
  });
  // Depth-first, in the order given: a step met again while its own references are being followed closes a cycle.
  const depthOf = new Array<number>(steps.length).fill(0);
  const state = new Array<'new' | 'open' | 'done'>(steps.length).fill('new');
  const order: number[] = [];
  const visit = (index: number, path: number[]): void => {
    if (state[index] === 'done') return;
    if (state[index] === 'open') {
      const cycle = [...path.slice(path.indexOf(index)), index].map((at) => steps[at]!.id).join(' → ');
      throw invalid(`steps.${path.at(-1)!}.input`, `the steps take one another's outputs in a cycle: ${cycle}`);
    }
    state[index] = 'open';
    let depth = 1;
    for (const { target } of after[index]!) {
      visit(target, [...path, index]);
      depth = Math.max(depth, depthOf[target]! + 1);
    }
    if (depth > LIMITS.pipeline.depth) {
      throw invalid(`steps.${index}`, `step "${steps[index]!.id}" ends a chain of ${depth} steps; a pipeline's chains are at most ${LIMITS.pipeline.depth} long`);
    }
    depthOf[index] = depth;
    state[index] = 'done';
    order.push(index);
  };
  steps.forEach((_, index) => visit(index, []));
  return {
    depth: Math.max(...depthOf),
    steps: order.map((index) => {
      const step = steps[index]!;
      const input = { ...step.input };
      for (const { field, target, reference } of after[index]!) {
        input[field] = { fromJob: jobIds[target]!, output: reference.output, ...(reference.artifact === undefined ? {} : { artifact: reference.artifact }) };
      }
      const { id, ...job } = step;
      return { id, jobId: jobIds[index]!, index, body: { ...job, input }, after: after[index]!.map(({ target }) => steps[target]!.id) };
    }),
  };
}
