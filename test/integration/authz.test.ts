import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { UploadCredentials, narrowGrant } from '../../src/orchestrator/auth/index.js';
import { inspectGrant } from '../../src/protocol/grant-token.js';
import { LINK_PATH } from '../../src/protocol/index.js';
import { meshForFile, waitFor } from '../helpers/mesh.js';

/**
 * Who may do what, on every route, in one table: a real `gpumesh up` (the
 * gallery link it prints, with a short --gallery-ttl), and a grant of each kind.
 * Every route the server's OpenAPI document lists must have a row, so a new
 * route cannot ship without an authorization decision; routes hidden from the
 * document (the agent link, the page, the document itself) have rows too.
 */
// A callback URL the config allows, for the webhook secret route (nothing listens on port 9: nothing is delivered there).
const running = meshForFile({ args: ['--gallery-ttl', '2h'], env: { GPUMESH_LOG_LEVEL: 'trace' }, config: { webhooks: { allow: ['http://127.0.0.1:9/hooks/'], allowLoopback: true } } });

const KINDS = ['none', 'admin', 'client', 'gallery', 'mesh', 'album', 'agent', 'upload', 'expired', 'revoked'] as const;
type Kind = (typeof KINDS)[number];

interface Fixtures {
  tokens: Record<Kind, string | null>;
  /** A finished image job in the default album, and its artifact's digest. */
  jobId: string;
  digest: string;
  /** A fresh grant's id, for the revocation route to take. */
  throwaway(): Promise<string>;
}

interface Target {
  path: string;
  body?: string | Uint8Array<ArrayBuffer>;
  contentType?: string;
}

interface Row {
  /** `METHOD /path` as in the OpenAPI document. */
  route: string;
  /** Not in the OpenAPI document. */
  hidden?: true;
  websocket?: true;
  /** One of the routes that take `?access_token=` (blob reads and event streams). */
  queryGrant?: true;
  request(fixtures: Fixtures): Target | Promise<Target>;
  expect: Record<Kind, number>;
}

/**
 * A route that needs a grant: no grant, an expired and a revoked one are always 401. An agent's upload
 * credential is not a grant at all, so it is 401 everywhere but the upload route.
 */
const granted = (outcomes: Omit<Record<Kind, number>, 'none' | 'expired' | 'revoked'>): Record<Kind, number> => ({ none: 401, expired: 401, revoked: 401, ...outcomes });
const everyone = (status: number): Record<Kind, number> => Object.fromEntries(KINDS.map((kind) => [kind, status])) as Record<Kind, number>;
const adminOnly = (status: number): Record<Kind, number> => granted({ admin: status, client: 403, gallery: 403, mesh: 403, album: 403, agent: 403, upload: 401 });
const meshRead = granted({ admin: 200, client: 200, gallery: 403, mesh: 200, album: 200, agent: 403, upload: 401 });
/** The A1111 door: grants that may submit image jobs. */
const imageDoor = (status: number): Record<Kind, number> => granted({ admin: status, client: status, gallery: status, mesh: 403, album: status, agent: 403, upload: 401 });

const simpleInfer = JSON.stringify({ inputs: ['INPUT0', 'INPUT1'].map((name) => ({ name, shape: [1, 16], datatype: 'INT32', data: new Array(16).fill(1) })) });
const tinyImage = JSON.stringify({ type: 'image', input: { prompt: 'authz probe', width: 8, height: 8, steps: 1 } });
const uploadBytes = new TextEncoder().encode('an output, uploaded by whoever may');
const uploadDigest = `sha256:${createHash('sha256').update(uploadBytes).digest('hex')}`;
/** A 1 × 1 PNG, for the ComfyUI door's uploads. */
const DOT = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');
/** A ComfyUI upload's multipart body, as a browser's FormData would send it. */
async function comfyUpload(path: string): Promise<Target> {
  const form = new FormData();
  form.append('image', new Blob([DOT], { type: 'image/png' }), 'dot.png');
  const encoded = new Request('http://authz.invalid/', { method: 'POST', body: form });
  return { path, body: new Uint8Array(await encoded.arrayBuffer()), contentType: encoded.headers.get('content-type')! };
}
/** A workflow this mesh has no model for (none runs workflows): 400 in ComfyUI's words, once the grant passed. */
const tinyPrompt = JSON.stringify({ prompt: { 1: { class_type: 'SaveImage', inputs: {} } } });
/** The ComfyUI door's reads of a grant's own prompts (jobs:read), and its submit-side routes (jobs:submit of `workflow`). */
const comfyRead = granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 200, agent: 403, upload: 401 });
const comfySubmit = granted({ admin: 200, client: 200, gallery: 403, mesh: 403, album: 200, agent: 403, upload: 401 });
const comfyCancel = granted({ admin: 200, client: 200, gallery: 403, mesh: 403, album: 200, agent: 403, upload: 401 });

/**
 * The table. `album` is a full client grant narrowed offline to `albums other`;
 * `gallery` is the grant in the link `gpumesh up` printed. A job the grant may
 * not see is 404 (it does not learn the job exists); cancelling a finished job
 * the grant may cancel is 409 (authorized, but too late).
 */
const TABLE: Row[] = [
  { route: 'GET /healthz', request: () => ({ path: '/healthz' }), expect: everyone(200) },
  { route: 'GET /readyz', request: () => ({ path: '/readyz' }), expect: everyone(200) },
  // The orchestrator's own package, for hosts joining with one line: public code, fetched by npx, which sends no grant.
  { route: 'GET /install', request: () => ({ path: '/install' }), expect: everyone(200) },
  { route: 'GET /install/gpumesh.tgz', request: () => ({ path: '/install/gpumesh.tgz' }), expect: everyone(200) },
  {
    route: 'GET /install/sha256/{sha256}/gpumesh.tgz',
    request: async () => ({ path: ((await (await fetch(`${running().url}/install`)).json()) as { path: string }).path }),
    expect: everyone(200),
  },
  { route: 'GET /v1/status', request: () => ({ path: '/v1/status' }), expect: meshRead },
  { route: 'GET /v1/hosts', request: () => ({ path: '/v1/hosts' }), expect: meshRead },
  { route: 'GET /metrics', request: () => ({ path: '/metrics' }), expect: meshRead },
  { route: 'GET /v1/series', request: () => ({ path: '/v1/series' }), expect: meshRead },
  { route: 'GET /v1/storage', request: () => ({ path: '/v1/storage' }), expect: meshRead },
  { route: 'GET /v1/models', request: () => ({ path: '/v1/models' }), expect: meshRead },
  // The registry: read like the mesh; changed only with models:write (admin). A version the body names that does not
  // exist is 404 for an admin, after the grant check.
  { route: 'GET /v1/models/{name}', request: () => ({ path: '/v1/models/gen' }), expect: meshRead },
  { route: 'POST /v1/models', request: () => ({ path: '/v1/models', body: JSON.stringify({ name: 'authz', file: `sha256:${'0'.repeat(64)}` }) }), expect: adminOnly(404) },
  { route: 'DELETE /v1/models/{name}', request: () => ({ path: '/v1/models/nothing@1' }), expect: adminOnly(404) },
  { route: 'PUT /v1/models/{name}/route', request: () => ({ path: '/v1/models/nothing/route', body: '{}' }), expect: adminOnly(404) },
  { route: 'POST /v1/models/{name}/load', request: () => ({ path: '/v1/models/nothing/load', body: '{}' }), expect: adminOnly(404) },
  { route: 'POST /v1/models/{name}/unload', request: () => ({ path: '/v1/models/nothing/unload', body: '{}' }), expect: adminOnly(404) },
  { route: 'POST /v1/grants', request: () => ({ path: '/v1/grants', body: JSON.stringify({ kind: 'client', note: 'authz table' }) }), expect: adminOnly(201) },
  { route: 'GET /v1/grants', request: () => ({ path: '/v1/grants?limit=5' }), expect: adminOnly(200) },
  // Any valid grant may narrow itself: narrowing only takes powers away.
  {
    route: 'POST /v1/grants:narrow', request: () => ({ path: '/v1/grants:narrow', body: JSON.stringify({ expires: '10m' }) }),
    expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 200, agent: 200, upload: 401 }),
  },
  { route: 'GET /v1/grants/{id}', request: async (f) => ({ path: `/v1/grants/${await f.throwaway()}` }), expect: adminOnly(200) },
  { route: 'DELETE /v1/grants/{id}', request: async (f) => ({ path: `/v1/grants/${await f.throwaway()}` }), expect: adminOnly(200) },
  { route: 'GET /v1/audit', request: () => ({ path: '/v1/audit?limit=5' }), expect: adminOnly(200) },
  // Drain a host that is not connected: authorized (404) for admins only, so the mesh's own agent stays.
  { route: 'POST /v1/hosts/{id}/drain', request: () => ({ path: '/v1/hosts/nobody-here/drain', body: '{}' }), expect: adminOnly(404) },
  {
    route: 'POST /v1/jobs', request: () => ({ path: '/v1/jobs', body: tinyImage }),
    // The album-narrowed grant's job goes to its own album (a job that names none goes to the grant's first album).
    expect: granted({ admin: 202, client: 202, gallery: 202, mesh: 403, album: 202, agent: 403, upload: 401 }),
  },
  {
    route: 'POST /v1/jobs:batch', request: () => ({ path: '/v1/jobs:batch', body: JSON.stringify({ jobs: [JSON.parse(tinyImage)] }) }),
    // Each job is admitted or refused on its own, so a grant that may submit at all gets 207.
    expect: granted({ admin: 207, client: 207, gallery: 207, mesh: 403, album: 207, agent: 403, upload: 401 }),
  },
  { route: 'GET /v1/jobs', request: () => ({ path: '/v1/jobs?limit=5' }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 200, agent: 403, upload: 401 }) },
  { route: 'GET /v1/jobs/{id}', request: (f) => ({ path: `/v1/jobs/${f.jobId}` }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 404, agent: 403, upload: 401 }) },
  // Explaining a job shows what reading it shows, no more: the same visibility.
  { route: 'GET /v1/jobs/{id}/webhooks', request: (f) => ({ path: `/v1/jobs/${f.jobId}/webhooks` }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 404, agent: 403, upload: 401 }) },
  { route: 'POST /v1/webhooks/secret', request: () => ({ path: '/v1/webhooks/secret', body: JSON.stringify({ url: 'http://127.0.0.1:9/hooks/x' }) }), expect: adminOnly(200) },
  { route: 'GET /v1/jobs/{id}/explain', request: (f) => ({ path: `/v1/jobs/${f.jobId}/explain` }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 404, agent: 403, upload: 401 }) },
  { route: 'DELETE /v1/jobs/{id}', request: (f) => ({ path: `/v1/jobs/${f.jobId}` }), expect: granted({ admin: 409, client: 409, gallery: 403, mesh: 403, album: 404, agent: 403, upload: 401 }) },
  {
    route: 'GET /v1/jobs/{id}/events', queryGrant: true, request: (f) => ({ path: `/v1/jobs/${f.jobId}/events` }),
    expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 404, agent: 403, upload: 401 }),
  },
  // Pipelines: submitting one is submitting its steps; reading or cancelling one of none is 404 where the grant may.
  {
    route: 'POST /v1/pipelines', request: () => ({ path: '/v1/pipelines', body: JSON.stringify({ steps: [{ id: 'a', ...JSON.parse(tinyImage) }] }) }),
    expect: granted({ admin: 202, client: 202, gallery: 202, mesh: 403, album: 202, agent: 403, upload: 401 }),
  },
  { route: 'GET /v1/pipelines/{id}', request: () => ({ path: '/v1/pipelines/p_none' }), expect: granted({ admin: 404, client: 404, gallery: 404, mesh: 404, album: 404, agent: 403, upload: 401 }) },
  { route: 'GET /v1/pipelines/{id}/webhooks', request: () => ({ path: '/v1/pipelines/p_none/webhooks' }), expect: granted({ admin: 404, client: 404, gallery: 404, mesh: 404, album: 404, agent: 403, upload: 401 }) },
  { route: 'DELETE /v1/pipelines/{id}', request: () => ({ path: '/v1/pipelines/p_none' }), expect: granted({ admin: 404, client: 404, gallery: 403, mesh: 403, album: 404, agent: 403, upload: 401 }) },
  {
    route: 'GET /v1/pipelines/{id}/events', queryGrant: true, request: () => ({ path: '/v1/pipelines/p_none/events' }),
    expect: granted({ admin: 404, client: 404, gallery: 404, mesh: 404, album: 404, agent: 403, upload: 401 }),
  },
  { route: 'GET /v1/events', queryGrant: true, request: () => ({ path: '/v1/events' }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 200, agent: 403, upload: 401 }) },
  // Blobs are shared by digest: a grant limited to albums reads only what was published in them; agents read any (model files).
  { route: 'GET /v1/blobs/{digest}', queryGrant: true, request: (f) => ({ path: `/v1/blobs/${f.digest}` }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 403, album: 404, agent: 200, upload: 401 }) },
  { route: 'HEAD /v1/blobs/{digest}', queryGrant: true, request: (f) => ({ path: `/v1/blobs/${f.digest}` }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 403, album: 404, agent: 200, upload: 401 }) },
  { route: 'GET /v1/artifacts', request: () => ({ path: '/v1/artifacts?limit=5' }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 403, album: 200, agent: 403, upload: 401 }) },
  // The gallery's own routes: what the page asks first, thumbnails (as the blob they shrink), and deleting a job's
  // results (artifacts:delete; here of a job that does not exist, so the table deletes nothing).
  { route: 'GET /v1/gallery', request: () => ({ path: '/v1/gallery' }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 403, album: 200, agent: 403, upload: 401 }) },
  {
    route: 'GET /v1/blobs/{digest}/thumbnail', queryGrant: true, request: (f) => ({ path: `/v1/blobs/${f.digest}/thumbnail?width=256` }),
    expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 403, album: 404, agent: 200, upload: 401 }),
  },
  {
    route: 'DELETE /v1/jobs/{id}/artifacts', request: () => ({ path: '/v1/jobs/j_nothing/artifacts' }),
    expect: granted({ admin: 404, client: 404, gallery: 403, mesh: 403, album: 404, agent: 403, upload: 401 }),
  },
  {
    route: 'PUT /v1/jobs/{id}/outputs/{digest}',
    request: (f) => ({ path: `/v1/jobs/${f.jobId}/outputs/${uploadDigest}`, body: uploadBytes, contentType: 'text/plain' }),
    // Only an agent's upload credential for the job's batch opens this route (no grant does), and only while the job runs
    // in that batch: this one has finished, so even the right credential is 403. (201 is covered in test/integration/link.test.ts.)
    expect: granted({ admin: 401, client: 401, gallery: 401, mesh: 401, album: 401, agent: 401, upload: 403 }),
  },
  // A client's files: grants that may write blobs (admin, client; not the gallery's, the mesh view's or an agent's).
  { route: 'PUT /v1/blobs', request: () => ({ path: '/v1/blobs', body: uploadBytes, contentType: 'text/plain' }), expect: granted({ admin: 201, client: 201, gallery: 403, mesh: 403, album: 201, agent: 403, upload: 401 }) },
  // A lineage deletes only what it stored: a result's digest none of these stored is 404 to those that may write blobs.
  { route: 'DELETE /v1/blobs/{digest}', request: (f) => ({ path: `/v1/blobs/${f.digest}` }), expect: granted({ admin: 404, client: 404, gallery: 403, mesh: 403, album: 404, agent: 403, upload: 401 }) },
  { route: 'POST /v1/uploads', request: () => ({ path: '/v1/uploads', body: '{}' }), expect: granted({ admin: 201, client: 201, gallery: 403, mesh: 403, album: 201, agent: 403, upload: 401 }) },
  // An upload is its lineage's: another's id is 404 (this one exists for no grant); a chunk without its offset is 400.
  { route: 'GET /v1/uploads/{id}', request: () => ({ path: '/v1/uploads/u_0' }), expect: granted({ admin: 404, client: 404, gallery: 403, mesh: 403, album: 404, agent: 403, upload: 401 }) },
  { route: 'HEAD /v1/uploads/{id}', request: () => ({ path: '/v1/uploads/u_0' }), expect: granted({ admin: 404, client: 404, gallery: 403, mesh: 403, album: 404, agent: 403, upload: 401 }) },
  { route: 'DELETE /v1/uploads/{id}', request: () => ({ path: '/v1/uploads/u_0' }), expect: granted({ admin: 404, client: 404, gallery: 403, mesh: 403, album: 404, agent: 403, upload: 401 }) },
  { route: 'POST /v1/uploads/{id}/complete', request: () => ({ path: '/v1/uploads/u_0/complete', body: '{}' }), expect: granted({ admin: 404, client: 404, gallery: 403, mesh: 403, album: 404, agent: 403, upload: 401 }) },
  { route: 'PATCH /v1/uploads/{id}', request: () => ({ path: '/v1/uploads/u_0', body: uploadBytes, contentType: 'application/octet-stream' }), expect: granted({ admin: 400, client: 400, gallery: 403, mesh: 403, album: 400, agent: 403, upload: 401 }) },
  // OpenAI's images API: generations and edits submit image jobs (as POST /v1/jobs); the models list answers any grant
  // with the models it may use. An edit that is not multipart is refused once the grant passed.
  {
    route: 'POST /openai/v1/images/generations', request: () => ({ path: '/openai/v1/images/generations', body: '{"prompt":"x","size":"8x8","response_format":"b64_json"}' }),
    expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 403, album: 200, agent: 403, upload: 401 }),
  },
  {
    route: 'POST /openai/v1/images/edits', request: () => ({ path: '/openai/v1/images/edits', body: '{"prompt":"x"}' }),
    expect: granted({ admin: 400, client: 400, gallery: 400, mesh: 403, album: 400, agent: 403, upload: 401 }),
  },
  { route: 'GET /openai/v1/models', request: () => ({ path: '/openai/v1/models' }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 200, agent: 200, upload: 401 }) },
  { route: 'GET /openai/v1/models/{model}', request: () => ({ path: '/openai/v1/models/gen' }), expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 200, album: 200, agent: 200, upload: 401 }) },
  // The ComfyUI-compatible door (at the root, and under /api, hidden from the document): its credentials come as Bearer,
  // Basic's password or an open door's grant (none is open here); its answers are ComfyUI's. A workflow of a node no
  // host has is refused once the grant passed; the gallery's grant may submit only images and clips.
  { route: 'POST /prompt', request: () => ({ path: '/prompt', body: tinyPrompt }), expect: granted({ admin: 400, client: 400, gallery: 403, mesh: 403, album: 400, agent: 403, upload: 401 }) },
  { route: 'POST /api/prompt', hidden: true, request: () => ({ path: '/api/prompt', body: tinyPrompt }), expect: granted({ admin: 400, client: 400, gallery: 403, mesh: 403, album: 400, agent: 403, upload: 401 }) },
  { route: 'GET /prompt', request: () => ({ path: '/prompt' }), expect: comfyRead },
  { route: 'GET /history', request: () => ({ path: '/history' }), expect: comfyRead },
  { route: 'GET /history/{prompt_id}', request: () => ({ path: '/history/nothing' }), expect: comfyRead },
  { route: 'GET /api/history', hidden: true, request: () => ({ path: '/api/history?max_items=2' }), expect: comfyRead },
  { route: 'GET /queue', request: () => ({ path: '/queue' }), expect: comfyRead },
  { route: 'POST /queue', request: () => ({ path: '/queue', body: '{"clear":true}' }), expect: comfyCancel },
  { route: 'POST /interrupt', request: () => ({ path: '/interrupt', body: '{}' }), expect: comfyCancel },
  // A job's result by the name the door gives it: read as its blob is read (a grant limited to other albums: 404).
  {
    route: 'GET /view', request: (f) => ({ path: `/view?filename=${f.digest.slice('sha256:'.length)}.png&subfolder=&type=output` }),
    expect: granted({ admin: 200, client: 200, gallery: 200, mesh: 403, album: 404, agent: 403, upload: 401 }),
  },
  { route: 'POST /upload/image', request: () => comfyUpload('/upload/image'), expect: granted({ admin: 200, client: 200, gallery: 403, mesh: 403, album: 200, agent: 403, upload: 401 }) },
  { route: 'POST /upload/mask', request: () => comfyUpload('/upload/mask'), expect: granted({ admin: 200, client: 200, gallery: 403, mesh: 403, album: 200, agent: 403, upload: 401 }) },
  { route: 'GET /object_info', request: () => ({ path: '/object_info' }), expect: comfySubmit },
  { route: 'GET /object_info/{node_class}', request: () => ({ path: '/object_info/KSampler' }), expect: comfySubmit },
  { route: 'GET /system_stats', request: () => ({ path: '/system_stats' }), expect: comfySubmit },
  { route: 'GET /api/system_stats', hidden: true, request: () => ({ path: '/api/system_stats' }), expect: comfySubmit },
  { route: 'GET /ws', websocket: true, request: () => ({ path: '/ws?clientId=authz' }), expect: granted({ admin: 101, client: 101, gallery: 101, mesh: 101, album: 101, agent: 403, upload: 401 }) },
  // AUTOMATIC1111's API at the root: every route needs a grant that may submit image jobs (as Bearer here; Basic's
  // password too), /interrupt and /skip one that may cancel them. img2img without a picture is refused once the grant passed.
  ...['/sdapi/v1/options', '/sdapi/v1/progress', '/sdapi/v1/sd-models', '/sdapi/v1/samplers', '/sdapi/v1/schedulers', '/sdapi/v1/sd-vae', '/sdapi/v1/upscalers',
    '/sdapi/v1/latent-upscale-modes', '/sdapi/v1/loras', '/sdapi/v1/cmd-flags'].map((path): Row => ({ route: `GET ${path}`, request: () => ({ path }), expect: imageDoor(200) })),
  { route: 'POST /sdapi/v1/options', request: () => ({ path: '/sdapi/v1/options', body: '{}' }), expect: imageDoor(200) },
  { route: 'POST /sdapi/v1/txt2img', request: () => ({ path: '/sdapi/v1/txt2img', body: '{"prompt":"authz probe","width":8,"height":8,"steps":1}' }), expect: imageDoor(200) },
  { route: 'POST /sdapi/v1/img2img', request: () => ({ path: '/sdapi/v1/img2img', body: '{"prompt":"x"}' }), expect: imageDoor(422) },
  ...['/sdapi/v1/interrupt', '/sdapi/v1/skip'].map((path): Row => ({
    route: `POST ${path}`, request: () => ({ path }), expect: granted({ admin: 200, client: 200, gallery: 403, mesh: 403, album: 200, agent: 403, upload: 401 }),
  })),
  // The Open Inference Protocol: health and server metadata need no grant (as /healthz); model metadata reads the mesh;
  // infer submits a job (the gallery's grant may submit only images, so it is refused the tensor job).
  { route: 'GET /v2/health/live', request: () => ({ path: '/v2/health/live' }), expect: everyone(200) },
  { route: 'GET /v2/health/ready', request: () => ({ path: '/v2/health/ready' }), expect: everyone(200) },
  { route: 'GET /v2', request: () => ({ path: '/v2' }), expect: everyone(200) },
  { route: 'GET /v2/models/{model}', request: () => ({ path: '/v2/models/simple' }), expect: meshRead },
  { route: 'GET /v2/models/{model}/ready', request: () => ({ path: '/v2/models/simple/ready' }), expect: meshRead },
  { route: 'GET /v2/models/{model}/versions/{version}', request: () => ({ path: '/v2/models/simple/versions/1' }), expect: meshRead },
  { route: 'GET /v2/models/{model}/versions/{version}/ready', request: () => ({ path: '/v2/models/simple/versions/1/ready' }), expect: meshRead },
  {
    route: 'POST /v2/models/{model}/infer', request: () => ({ path: '/v2/models/simple/infer', body: simpleInfer }),
    expect: granted({ admin: 200, client: 200, gallery: 403, mesh: 403, album: 200, agent: 403, upload: 401 }),
  },
  {
    route: 'POST /v2/models/{model}/versions/{version}/infer', request: () => ({ path: '/v2/models/simple/versions/1/infer', body: simpleInfer }),
    expect: granted({ admin: 200, client: 200, gallery: 403, mesh: 403, album: 200, agent: 403, upload: 401 }),
  },
  // The ComfyUI pass-through: jobs:submit on the model and host, then (here) 404, for no such model or host exists. A
  // WebSocket without any credentials is a connection probe (Krita's): opened, then closed at once with nothing relayed.
  ...(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const).map((method): Row => ({
    route: `${method} /comfyui/{host}/{model}/{path}`,
    request: () => ({ path: '/comfyui/nowhere/nothing/system_stats', ...(['POST', 'PUT', 'PATCH'].includes(method) ? { body: '{}' } : {}) }),
    expect: granted({ admin: 404, client: 404, gallery: 404, mesh: 403, album: 404, agent: 403, upload: 401 }),
  })),
  {
    route: 'GET /comfyui/{host}/{model}/{path}', websocket: true, request: () => ({ path: '/comfyui/nowhere/nothing/ws?clientId=authz' }),
    expect: { ...granted({ admin: 404, client: 404, gallery: 404, mesh: 403, album: 404, agent: 403, upload: 401 }), none: 101 },
  },
  { route: `GET ${LINK_PATH}`, websocket: true, request: () => ({ path: LINK_PATH }), expect: granted({ admin: 101, client: 403, gallery: 403, mesh: 403, album: 403, agent: 101, upload: 401 }) },
  { route: 'GET /', hidden: true, request: () => ({ path: '/' }), expect: everyone(200) },
  { route: 'GET /web/gallery.js', hidden: true, request: () => ({ path: '/web/gallery.js' }), expect: everyone(200) },
  // The mesh view's page and script: nothing without a grant, like the gallery; what it fetches needs the mesh link's grant.
  { route: 'GET /mesh', hidden: true, request: () => ({ path: '/mesh' }), expect: everyone(200) },
  { route: 'GET /web/mesh.js', hidden: true, request: () => ({ path: '/web/mesh.js' }), expect: everyone(200) },
  { route: 'GET /openapi.json', hidden: true, request: () => ({ path: '/openapi.json' }), expect: everyone(200) },
];

let fixtures: Fixtures;

async function api<T>(method: string, path: string, body?: unknown, grant = running().admin): Promise<T> {
  const response = await fetch(`${running().url}${path}`, {
    method, headers: { authorization: `Bearer ${grant}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await response.json()) as T;
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

/** The status a route answers: HTTP status, or 101 when a WebSocket upgrade succeeds. Streams are closed once their headers arrive. */
async function statusOf(row: Row, target: Target, auth: { header?: string | null; query?: string | null }): Promise<number> {
  const url = new URL(target.path, running().url);
  if (auth.query) url.searchParams.set('access_token', auth.query);
  const headers: Record<string, string> = {};
  if (auth.header) headers.authorization = `Bearer ${auth.header}`;
  if (row.websocket) {
    url.protocol = 'ws:';
    return new Promise((resolve) => {
      const socket = new WebSocket(url, { headers });
      socket.on('upgrade', () => {
        resolve(101);
        socket.terminate();
      });
      socket.on('unexpected-response', (request, response) => {
        resolve(response.statusCode ?? 0);
        request.destroy();
      });
      socket.on('error', () => {});
    });
  }
  if (target.body !== undefined) headers['content-type'] = target.contentType ?? 'application/json';
  const controller = new AbortController();
  const method = row.route.split(' ')[0]!;
  const response = await fetch(url, { method, headers, body: target.body, signal: controller.signal });
  controller.abort();
  return response.status;
}

beforeAll(async () => {
  const mesh = running();
  const admin = mesh.admin;
  // The mesh view's link, the line after the gallery's.
  const meshUrl = await waitFor(() => /^\s+mesh\s+(\S+)$/m.exec(mesh.output())?.[1], { what: 'gpumesh up to print the mesh link' });
  const mint = async (body: Record<string, unknown>): Promise<{ id: string; token: string }> => api('POST', '/v1/grants', body);
  const client = await mint({ kind: 'client', note: 'full client' });
  const agent = await mint({ kind: 'agent', host: 'authz-probe', classes: ['image'] });
  const expired = await mint({ kind: 'client', expires: '2000-01-01T00:00:00.000Z' });
  const revoked = await mint({ kind: 'client' });
  await api('DELETE', `/v1/grants/${revoked.id}`);

  const job = await api<{ id: string }>('POST', '/v1/jobs', { type: 'image', input: { prompt: 'the authz table\'s job', width: 16, height: 16, steps: 1 } });
  expect((await mesh.client().follow(job.id)).type).toBe('succeeded');
  const view = await api<{ artifacts: { digest: string }[]; batch: { id: string } }>('GET', `/v1/jobs/${job.id}`);

  // The orchestrator gives its agents an upload credential per batch; sign one the same way, for this job's batch.
  const rootKey = Buffer.from(readFileSync(join(mesh.data, 'secret.key'), 'utf8').trim(), 'base64');
  const upload = { token: new UploadCredentials(rootKey).mint(view.batch.id, Date.now() + 3_600_000) };

  fixtures = {
    tokens: {
      none: null, admin, client: client.token, gallery: new URL(mesh.galleryUrl).hash.slice('#grant='.length), mesh: new URL(meshUrl).hash.slice('#grant='.length),
      album: narrowGrant(client.token, ['albums other']), agent: agent.token, upload: upload.token, expired: expired.token, revoked: revoked.token,
    },
    jobId: job.id,
    digest: view.artifacts[0]!.digest,
    throwaway: async () => (await mint({ kind: 'client', note: 'to be revoked' })).id,
  };
});

describe('authorization on every route', () => {
  it('every route in the OpenAPI document has a row in the table, and every row that is not hidden is in the document', async () => {
    const document = (await (await fetch(`${running().url}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
    const published = Object.entries(document.paths).flatMap(([path, methods]) => Object.keys(methods).map((method) => `${method.toUpperCase()} ${path}`));
    const declared = new Set(TABLE.map((row) => row.route));
    expect(published.filter((route) => !declared.has(route)), 'routes without an authorization decision').toEqual([]);
    expect(TABLE.filter((row) => !row.hidden && !published.includes(row.route)).map((row) => row.route), 'rows for routes that are gone').toEqual([]);
    expect(TABLE.filter((row) => row.hidden && published.includes(row.route)).map((row) => row.route), 'rows marked hidden that are published').toEqual([]);
  });

  it('each route answers each kind of grant as the table says (grant in the Authorization header)', async () => {
    const mismatches: string[] = [];
    for (const row of TABLE) {
      for (const kind of KINDS) {
        const status = await statusOf(row, await row.request(fixtures), { header: fixtures.tokens[kind] });
        if (status !== row.expect[kind]) mismatches.push(`${row.route} with ${kind}: ${status}, expected ${row.expect[kind]}`);
      }
    }
    expect(mismatches).toEqual([]);
  });

  it('a grant in the query string works only on blob reads and event streams; everywhere else it is 400 GRANT_IN_QUERY, header or not (finding 5)', async () => {
    const mismatches: string[] = [];
    for (const row of TABLE) {
      const alone = await statusOf(row, await row.request(fixtures), { query: fixtures.tokens.admin });
      const expected = row.queryGrant ? row.expect.admin : 400;
      if (alone !== expected) mismatches.push(`${row.route} with ?access_token=<admin>: ${alone}, expected ${expected}`);
      // With a header as well: refused everywhere (a grant sent twice is a client mistake too).
      const both = await statusOf(row, await row.request(fixtures), { query: fixtures.tokens.admin, header: fixtures.tokens.admin });
      if (both !== 400) mismatches.push(`${row.route} with ?access_token= and a header: ${both}, expected 400`);
    }
    expect(mismatches).toEqual([]);
    // The answer says what to do instead; a query grant can no longer mint an admin grant.
    const mint = await fetch(`${running().url}/v1/grants?access_token=${encodeURIComponent(running().admin)}`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'admin' }),
    });
    expect(mint.status).toBe(400);
    expect(((await mint.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'GRANT_IN_QUERY', message: expect.stringContaining('Authorization: Bearer'),
    });
    // The gallery's way of showing images still works: its grant in an <img> URL, for its own album's blobs.
    const img = await fetch(`${running().url}/v1/blobs/${fixtures.digest}?access_token=${encodeURIComponent(fixtures.tokens.gallery!)}`);
    expect(img.status).toBe(200);
    expect(img.headers.get('content-type')).toBe('image/png');
  });

  it('no grant sent in a URL ends up in the orchestrator\'s log or the audit log', async () => {
    const tokens = Object.values(fixtures.tokens).filter((token): token is string => token !== null);
    for (const token of tokens) {
      await fetch(`${running().url}/v1/jobs?access_token=${encodeURIComponent(token)}`);
      await fetch(`${running().url}/v1/blobs/${fixtures.digest}?access_token=${encodeURIComponent(token)}`);
      await fetch(`${running().url}/v1/nothing?access_token=${encodeURIComponent(token)}`);
    }
    const audit = JSON.stringify(await api('GET', '/v1/audit?limit=500'));
    const log = readFileSync(join(running().data, 'logs', 'orchestrator.log'), 'utf8');
    expect(audit).toContain('GRANT_IN_QUERY');
    expect(log.length).toBeGreaterThan(0);
    for (const token of tokens) {
      // The signature is the part of a token that is secret; the JSON around it is the same for every grant.
      const signature = UploadCredentials.looksLike(token) ? token.split('.').at(-1)! : JSON.parse(Buffer.from(token, 'base64url').toString()).s64 as string;
      expect(log).not.toContain(signature);
      expect(audit).not.toContain(signature);
    }
    expect(log).not.toMatch(/access_token=(?!\[redacted\])/);
  });
});

describe('the mesh link', () => {
  it('carries a grant that may read mesh status and follow jobs, nothing more, as briefly as the gallery link', () => {
    const { caveats } = inspectGrant(fixtures.tokens.mesh!);
    expect(caveats).toEqual(['kind client', 'actions jobs:read,mesh:read', expect.stringMatching(/^time-before /)]);
    const expires = Date.parse(caveats.at(-1)!.slice('time-before '.length));
    expect(expires).toBeGreaterThan(Date.now() + 110 * 60_000); // --gallery-ttl 2h covers both links
    expect(expires).toBeLessThanOrEqual(Date.now() + 120 * 60_000);
    expect(running().output()).toMatch(/^ {2}mesh {5}http:\/\/127\.0\.0\.1:\d+\/mesh#grant=\S+$/m);
  });
});

describe('the gallery link (finding 4)', () => {
  it('carries a short-lived grant that may only submit and read images in its album', () => {
    const { caveats } = inspectGrant(fixtures.tokens.gallery!);
    expect(caveats).toEqual([
      'kind client', 'types image,video', 'albums default', 'actions jobs:submit,jobs:read,artifacts:read,blobs:read', expect.stringMatching(/^time-before /),
    ]);
    const expires = Date.parse(caveats.at(-1)!.slice('time-before '.length));
    // --gallery-ttl 2h on this mesh.
    expect(expires).toBeGreaterThan(Date.now() + 110 * 60_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 120 * 60_000);
    expect(running().output()).toContain('images and clips in album default, until');
  });

  it('cannot see, follow, fetch or cancel another album\'s job, nor find it in listings or the event stream', async () => {
    const gallery = fixtures.tokens.gallery!;
    const seen: string[] = [];
    const controller = new AbortController();
    const listening = fetch(`${running().url}/v1/events?access_token=${encodeURIComponent(gallery)}`, { signal: controller.signal })
      .then(async (response) => {
        for await (const chunk of response.body!) seen.push(Buffer.from(chunk as Uint8Array).toString());
      })
      .catch(() => {});
    const job = await api<{ id: string }>('POST', '/v1/jobs', { type: 'image', album: 'private', input: { prompt: 'the admin\'s private picture', width: 16, height: 16, steps: 1 } });
    expect((await running().client().follow(job.id)).type).toBe('succeeded');
    const digest = (await api<{ artifacts: { digest: string }[] }>('GET', `/v1/jobs/${job.id}`)).artifacts[0]!.digest;

    const as = (method: string, path: string) => fetch(`${running().url}${path}`, { method, headers: { authorization: `Bearer ${gallery}` } });
    expect((await as('GET', `/v1/jobs/${job.id}`)).status).toBe(404);
    expect((await as('GET', `/v1/jobs/${job.id}/events`)).status).toBe(404);
    expect((await as('DELETE', `/v1/jobs/${job.id}`)).status).toBe(403);
    expect((await as('GET', `/v1/blobs/${digest}`)).status).toBe(404);
    expect(JSON.stringify(await (await as('GET', '/v1/jobs?limit=200')).json())).not.toContain(job.id);
    expect(JSON.stringify(await (await as('GET', '/v1/artifacts?limit=200')).json())).not.toContain(job.id);
    // A client grant narrowed to the default album may cancel, but not a job in another album: 404, as if it did not exist.
    const defaultOnly = narrowGrant(fixtures.tokens.client!, ['albums default']);
    const cancel = await fetch(`${running().url}/v1/jobs/${job.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${defaultOnly}` } });
    expect(cancel.status).toBe(404);
    // Its own album's jobs do reach it on the stream.
    const own = await api<{ id: string }>('POST', '/v1/jobs', { type: 'image', input: { prompt: 'for the gallery', width: 16, height: 16, steps: 1 } });
    await running().client().follow(own.id);
    await expect.poll(() => seen.join(''), { timeout: 10_000 }).toContain(`"jobId":"${own.id}"`);
    controller.abort();
    await listening;
    expect(seen.join('')).not.toContain(job.id);
  });
});
