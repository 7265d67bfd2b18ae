import { z } from 'zod';
import { NodeClassInfo } from '../../../protocol/index.js';
import { BINARY, errorResponses, type DocResponse, type RouteDocs } from '../openapi.js';

/**
 * The ComfyUI-compatible door's routes in /openapi.json: ComfyUI's own shapes (server.py), as its clients read them.
 * The routes read their bodies themselves (a prompt as JSON whatever its content type; uploads as multipart).
 */

/** ComfyUI's error answer (`{error, node_errors}`); gpumesh's code in `error.extra_info.code` where it is not ComfyUI's own. */
const ComfyError = z.object({
  error: z.object({
    type: z.string().describe('invalid_prompt, prompt_outputs_failed_validation, no_prompt as ComfyUI; otherwise gpumesh\'s code in lower case'),
    message: z.string(), details: z.string(), extra_info: z.record(z.string(), z.unknown()),
  }),
  node_errors: z.record(z.string(), z.unknown()).describe('per node: {errors: [{type, message, details, extra_info}], dependent_outputs, class_type}'),
});

const GRANT = { 401: 'No grant (Bearer, or the password of HTTP Basic), or one that is not valid', 403: 'The grant does not allow this' };
const errors = (reasons: Record<number, string>): Record<number, DocResponse> => errorResponses(ComfyError, { ...GRANT, ...reasons });
const answer = (description: string, schema: z.ZodType): Record<number, DocResponse> => ({ 200: { description, content: { 'application/json': schema } } });

const Workflow = z.record(z.string(), z.object({ class_type: z.string(), inputs: z.record(z.string(), z.unknown()) })).describe('an API-format workflow ("Export (API)")');
const PromptRequest = z.object({
  prompt: Workflow,
  client_id: z.string().optional().describe('the client\'s /ws id: its socket hears of this prompt'),
  prompt_id: z.string().optional().describe('the id the client chose (echoed); default: a new UUID'),
  front: z.boolean().optional().describe('to the front: the highest priority the grant allows'),
  extra_data: z.record(z.string(), z.unknown()).optional(),
});
/** The content types a prompt is read from: any, as ComfyUI reads its body as JSON whatever the header says. */
const PROMPT_TYPES = ['application/json', 'text/plain', 'application/x-www-form-urlencoded'] as const;

export const PROMPT_DOCS: RouteDocs = {
  body: Object.fromEntries(PROMPT_TYPES.map((type) => [type, PromptRequest])),
  responses: {
    ...answer('Queued as a mesh job', z.object({ prompt_id: z.string(), number: z.int().describe('the job\'s sequence number'), node_errors: z.record(z.string(), z.unknown()) })),
    ...errors({
      400: 'Not a workflow, a link to no node, a node class or a model no connected host has (ComfyUI\'s invalid_prompt, prompt_outputs_failed_validation), or an input the mesh refuses',
      413: 'The body is over the limit', 429: 'A queue is full, or the grant\'s rate or caps are spent (Retry-After)',
    }),
  },
};

export const QUEUE_INFO_DOCS: RouteDocs = { responses: { ...answer('Prompts of this grant not ended yet', z.object({ exec_info: z.object({ queue_remaining: z.int() }) })), ...errors({}) } };

const HistoryItem = z.object({
  prompt: z.array(z.unknown()).describe('[number, prompt_id, workflow, extra_data, outputs_to_execute]'),
  outputs: z.record(z.string(), z.object({ images: z.array(z.object({ filename: z.string(), subfolder: z.string(), type: z.string() })) })),
  status: z.object({ status_str: z.enum(['success', 'error']), completed: z.boolean(), messages: z.array(z.unknown()) }),
  meta: z.record(z.string(), z.unknown()),
});

export const HISTORY_DOCS: RouteDocs = {
  responses: { ...answer('This grant\'s finished prompts by id, oldest first (the newest 64, or max_items)', z.record(z.string(), HistoryItem)), ...errors({}) },
};
export const PROMPT_HISTORY_DOCS: RouteDocs = {
  responses: { ...answer('{<prompt_id>: item} once it finished; {} before, or for a prompt this grant may not see', z.record(z.string(), HistoryItem)), ...errors({}) },
};

export const VIEW_DOCS: RouteDocs = {
  responses: {
    200: { description: 'The file, with its image or video type', content: { 'image/*': BINARY, 'video/*': BINARY } },
    ...errors({ 404: 'No such file that this grant may read' }),
  },
};

const Uploaded = z.object({ name: z.string().describe('<sha256 hex>.<ext>: what a workflow\'s LoadImage names'), subfolder: z.string(), type: z.string() });
const UploadRequest = z.object({
  image: z.file().describe('a PNG, JPEG or WebP'), subfolder: z.string().optional(), type: z.enum(['input', 'temp', 'output']).optional(), overwrite: z.string().optional(),
});
export const UPLOAD_IMAGE_DOCS: RouteDocs = {
  body: { 'multipart/form-data': UploadRequest },
  responses: { ...answer('Stored as this grant\'s', Uploaded), ...errors({ 400: 'No picture, or one gpumesh will not decode (IMAGE_REFUSED)', 413: 'The picture is over the limit' }) },
};
export const UPLOAD_MASK_DOCS: RouteDocs = {
  body: { 'multipart/form-data': UploadRequest.extend({ original_ref: z.string().describe('JSON {filename, subfolder, type} of the picture the mask\'s alpha is laid over') }) },
  responses: UPLOAD_IMAGE_DOCS.responses,
};

const QueueEntry = z.array(z.unknown()).describe('[number, prompt_id, workflow, extra_data, outputs_to_execute]');
export const QUEUE_DOCS: RouteDocs = {
  responses: { ...answer('This grant\'s prompts running and waiting', z.object({ queue_running: z.array(QueueEntry), queue_pending: z.array(QueueEntry) })), ...errors({}) },
};
const done: Record<number, DocResponse> = { 200: { description: 'Done (nothing in the body, as ComfyUI)' } };
export const QUEUE_CHANGE_DOCS: RouteDocs = {
  body: { 'application/json': z.object({ clear: z.boolean().optional(), delete: z.array(z.string()).optional().describe('prompt ids') }) },
  responses: { ...done, ...errors({ 400: 'Not such an object' }) },
};
export const INTERRUPT_DOCS: RouteDocs = {
  body: { 'application/json': z.object({ prompt_id: z.string().optional() }) },
  responses: { ...done, ...errors({}) },
};

export const OBJECT_INFO_DOCS: RouteDocs = {
  responses: { ...answer('Every node class a connected host\'s ComfyUI has, combo choices of all hosts together', z.record(z.string(), NodeClassInfo)), ...errors({}) },
};
export const SYSTEM_STATS_DOCS: RouteDocs = {
  responses: {
    ...answer('The orchestrator\'s machine, and the devices of the hosts that run workflows', z.object({
      system: z.record(z.string(), z.unknown()),
      devices: z.array(z.object({ name: z.string(), type: z.string(), index: z.int(), vram_total: z.number(), vram_free: z.number(), torch_vram_total: z.number(), torch_vram_free: z.number() })),
    })),
    ...errors({}),
  },
};
export const SOCKET_DOCS: RouteDocs = {
  responses: {
    101: { description: 'Switched to ComfyUI\'s WebSocket: JSON {type, data} messages (status, execution_start, executing, progress, executed, execution_success, execution_error, execution_interrupted) for this client\'s prompts, and binary preview frames' },
    ...errors({ 426: 'A plain GET: this route is a WebSocket (UPGRADE_REQUIRED)' }),
  },
};
