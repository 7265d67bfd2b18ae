import { z } from 'zod';
import { errorResponses, type DocResponse, type RouteDocs } from '../openapi.js';
import { EditFields, GenerationBody } from './image-requests.js';

/**
 * The images routes' bodies and answers in /openapi.json. The routes read their bodies themselves (a JSON body
 * through `readImagesRequest`, an edit's parts as they stream), with the zod schemas used here.
 */

/** OpenAI's error shape (`openAiErrorBody`), gpumesh's code in `code`. */
const OpenAiError = z.object({
  error: z.object({
    message: z.string(),
    type: z.string().describe('invalid_request_error, authentication_error, permission_error, not_found_error, rate_limit_error or server_error, by status'),
    param: z.string().nullable().describe('the request field at fault, when one is'),
    code: z.string().describe('a code of the error registry (docs/errors.md), e.g. VALIDATION_FAILED'),
  }),
});

/** OpenAI's images response (without `stream`). */
const ImagesResponse = z.object({
  created: z.int().describe('Unix seconds'),
  data: z.array(z.union([
    z.object({ url: z.string().describe('the picture, readable for an hour without a header (a read-only grant in the URL)') }),
    z.object({ b64_json: z.string() }),
  ])),
  output_format: z.enum(['png', 'jpeg', 'webp']),
  size: z.string().describe('WIDTHxHEIGHT of the pictures'),
});

const ANSWERS: Record<number, DocResponse> = {
  200: {
    description: 'The pictures once their jobs have ended; with stream: true, OpenAI\'s image events as they happen',
    content: {
      'application/json': ImagesResponse,
      'text/event-stream': {
        type: 'string',
        description: 'With stream: true: <operation>.partial_image events (partial_images previews of the refinement), <operation>.completed for each picture, `error` for one that failed; <operation> is image_generation or image_edit',
      },
    },
  },
  ...errorResponses(OpenAiError, {
    400: 'A field is invalid (VALIDATION_FAILED, param names it), or a picture is not one gpumesh will decode (IMAGE_REFUSED)',
    401: 'No grant (the API key), or one that is not valid',
    403: 'The grant does not allow jobs:submit, or this model or type',
    413: 'The body, or a picture of an edit, is larger than its limit',
    415: 'A content type the route does not read',
    422: 'The job is larger than any host can run, or no host can run an image job',
    429: "The model's or the mesh's queue is full, or the grant's rate is spent (Retry-After)",
    500: 'A job failed (ENGINE_FAILED names it and its error)',
    504: 'The pictures did not come within 10 minutes; the jobs go on',
  }),
};

export const GENERATION_DOCS: RouteDocs = {
  body: { 'application/json': GenerationBody },
  responses: ANSWERS,
};

const PICTURE = 'a PNG, JPEG or WebP file part';

/** An edit: its text fields as in EditFields, and its pictures as file parts. */
export const EDIT_DOCS: RouteDocs = {
  body: {
    'multipart/form-data': EditFields.extend({
      image: z.file().optional().describe(`The picture to start from: ${PICTURE}. Exactly one picture, as image or image[]`),
      'image[]': z.array(z.file()).max(1).optional().describe(`The picture to start from, as OpenAI's clients send a list: ${PICTURE}`),
      mask: z.file().optional().describe(`Optional: ${PICTURE} whose transparent pixels are repainted`),
    }),
  },
  responses: ANSWERS,
};

/** An OpenAI model object: each model (a model with versions, by its name) this grant may use. */
const OpenAiModel = z.strictObject({ id: z.string(), object: z.literal('model'), created: z.int(), owned_by: z.literal('gpumesh') });
export const OpenAiModelList = z.strictObject({ object: z.literal('list'), data: z.array(OpenAiModel) });

const MODEL_ERRORS = { 401: 'No grant (the API key), or one that is not valid' };

export const MODELS_DOCS: RouteDocs = {
  responses: { 200: { description: 'The models this grant may use', content: { 'application/json': OpenAiModelList } }, ...errorResponses(OpenAiError, MODEL_ERRORS) },
};
export const MODEL_DOCS: RouteDocs = {
  responses: {
    200: { description: 'The model', content: { 'application/json': OpenAiModel } },
    ...errorResponses(OpenAiError, { ...MODEL_ERRORS, 404: 'No such model that this grant may use' }),
  },
};
