import { ERRORS, isErrorCode } from '../../src/protocol/index.js';

/**
 * The documented 5xx answers, by path: `/readyz` is 503 NOT_READY while no agent is connected.
 * Anything else at or above 500 is a bug.
 */
export const DOCUMENTED_5XX: Record<string, { status: number; code: string }> = {
  '/readyz': { status: 503, code: 'NOT_READY' },
  // The OIP's readiness: not ready while no agent is connected (its error names why).
  '/v2/health/ready': { status: 503, code: 'NOT_READY' },
};

const REGISTERED_STATUSES = new Set<number>(Object.values(ERRORS).map(({ status }) => status));

/**
 * What must hold of an HTTP answer: no 5xx (unless `allowed` says this one is
 * documented), and every error in the envelope `{ error: { code, message } }` (on the Open Inference Protocol's
 * `/v2` routes, its own `{ error: "<message>" }`; under `/openai/v1`, OpenAI's `{ error: { message, type, param, code } }`;
 * under `/sdapi/v1`, A1111's `{ error: "<code>", detail, body, errors }` or FastAPI's 422 `{ detail: [{ loc, msg, type }] }`;
 * on the ComfyUI door's routes, ComfyUI's `{ error: { type, message, details, extra_info: { code } }, node_errors }`)
 * with a registered code of that status and its template filled in.
 * `sent` is the request's text, so a placeholder the client itself sent is not
 * mistaken for one the server forgot to fill.
 */
export function answerProblems(answer: { status: number; contentType: string | undefined; body: string; head: boolean }, sent: string, allowed?: { status: number; code: string }): string[] {
  const { status } = answer;
  if (status < 400) return [];
  const problems: string[] = [];
  if (!REGISTERED_STATUSES.has(status)) problems.push(`status ${status} has no code in the registry`);
  if (answer.head) {
    // A HEAD answer has no body to check.
    if (status >= 500 && status !== allowed?.status) problems.push(`status ${status} is a server error`);
    return problems;
  }
  if (!answer.contentType?.startsWith('application/json')) problems.push(`content-type ${answer.contentType ?? 'none'} is not JSON`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body);
  } catch {
    return [...problems, `the body is not JSON: ${JSON.stringify(answer.body.slice(0, 120))}`];
  }
  // The Open Inference Protocol's routes answer in its own shape, `{"error": "<message>"}` (clients written for Triton read it).
  // A path under /v2 that is no route (another method, a typo) is answered by the server's own 404, in the envelope.
  const oip = parsed as { error?: unknown } | null;
  if (/^(?:[A-Z]+ )?\/v2(?:[/?\s]|$)/.test(sent) && oip && typeof oip === 'object' && typeof oip.error === 'string') {
    if (Object.keys(oip).join() !== 'error' || !oip.error) return [...problems, `not the OIP error shape {"error": "…"}: ${answer.body.slice(0, 160)}`];
    if (status >= 500 && status !== allowed?.status) problems.push(`${status}: ${oip.error}`);
    return problems;
  }
  const comfy = comfyProblems(status, parsed, sent, allowed);
  if (comfy) return [...problems, ...comfy];
  // AUTOMATIC1111's door (`/sdapi/v1`) answers in A1111's shapes: FastAPI's `{"detail": [{loc, msg, type}]}` for a body
  // it refuses field by field (422), `{"error": "<code>", "detail", "body", "errors"}` for the rest.
  // What the server refuses before any route (a path that is not percent-encoding) is in the envelope there too.
  const envelope = parsed !== null && typeof parsed === 'object' && Object.keys(parsed).join() === 'error' && typeof (parsed as { error: unknown }).error === 'object';
  if (/^(?:[A-Z]+ )?\/sdapi\/v1(?:[/?\s]|$)/.test(sent) && parsed && typeof parsed === 'object' && !envelope) return [...problems, ...a1111Problems(parsed as Record<string, unknown>, status, sent, allowed)];
  const error = (parsed as { error?: { code?: unknown; message?: unknown; details?: unknown } } | null)?.error;
  if (!parsed || typeof parsed !== 'object' || Object.keys(parsed).join() !== 'error' || !error || typeof error !== 'object') {
    return [...problems, `not the envelope: ${answer.body.slice(0, 160)}`];
  }
  // OpenAI's images API answers in OpenAI's shape, gpumesh's code in `code` (clients written for OpenAI read it); what
  // the server refuses before any route (a path that is not percent-encoding, a request that is not HTTP) is in the envelope.
  const openAi = /^(?:[A-Z]+ )?\/openai\/v1(?:[/?\s]|$)/.test(sent) && Object.keys(error).sort().join() === 'code,message,param,type';
  // `details`, for the codes that carry what a client acts on (UPLOAD_CONFLICT's offset), is an object when present.
  const keys = Object.keys(error).filter((key) => !(key === 'details' && typeof error.details === 'object' && error.details !== null)).sort().join();
  if (!openAi && keys !== 'code,message') problems.push(`the error has keys ${Object.keys(error).join(', ')}`);
  if (typeof error.code !== 'string' || !isErrorCode(error.code)) return [...problems, `code ${String(error.code)} is not in the registry`];
  if (ERRORS[error.code].status !== status) problems.push(`code ${error.code} is registered as ${ERRORS[error.code].status}, answered ${status}`);
  if (typeof error.message !== 'string' || error.message.length === 0) problems.push('the message is empty');
  else {
    for (const [, name] of ERRORS[error.code].message.matchAll(/\{(\w+)\}/g)) {
      if (error.message.includes(`{${name}}`) && !sent.includes(`{${name}}`)) problems.push(`the message leaves {${name}} unfilled: ${error.message}`);
    }
  }
  if (status >= 500 && !(allowed && allowed.status === status && allowed.code === error.code)) problems.push(`${status} ${error.code}: ${error.message}`);
  return problems;
}


/** The ComfyUI-compatible door's routes, at the root and under /api (http/comfyui/routes.ts). */
const COMFY_DOOR = /^(?:[A-Z]+ )?(?:\/api)?\/(?:prompt|history|view|upload\/image|upload\/mask|queue|interrupt|object_info|system_stats|ws)(?:[/?\s]|$)/;
/** ComfyUI's own refusals of a prompt (execution.py's validate_prompt), which carry no gpumesh code. */
const COMFY_TYPES = new Set(['invalid_prompt', 'prompt_outputs_failed_validation', 'no_prompt']);

/**
 * What is wrong with an answer of the ComfyUI door in ComfyUI's shape — `{error: {type, message, details, extra_info},
 * node_errors}`, gpumesh's code in `extra_info.code` (registered, of this status) unless the type is ComfyUI's own; null
 * when the answer is not of that door or not in that shape (the envelope's check applies).
 */
function comfyProblems(status: number, parsed: unknown, sent: string, allowed?: { status: number; code: string }): string[] | null {
  if (!COMFY_DOOR.test(sent) || !parsed || typeof parsed !== 'object' || Object.keys(parsed).sort().join() !== 'error,node_errors') return null;
  const error = (parsed as { error?: { type?: unknown; message?: unknown; details?: unknown; extra_info?: { code?: unknown } } }).error;
  if (!error || typeof error !== 'object' || Object.keys(error).sort().join() !== 'details,extra_info,message,type') return [`not ComfyUI's error shape: ${JSON.stringify(parsed).slice(0, 160)}`];
  if (typeof error.message !== 'string' || error.message.length === 0) return ['the message is empty'];
  if (typeof error.type === 'string' && COMFY_TYPES.has(error.type)) return status === 400 ? [] : [`ComfyUI's ${error.type} answered ${status}`];
  const code = error.extra_info?.code;
  if (typeof code !== 'string' || !isErrorCode(code)) return [`code ${String(code)} is not in the registry`];
  const problems: string[] = [];
  if (ERRORS[code].status !== status) problems.push(`code ${code} is registered as ${ERRORS[code].status}, answered ${status}`);
  if (status >= 500 && !(allowed && allowed.status === status && allowed.code === code)) problems.push(`${status} ${code}: ${error.message}`);
  return problems;
}

/** What must hold of an error in A1111's shapes: a 422's issues each with loc, msg and type; else a registered code of its status. */
function a1111Problems(parsed: Record<string, unknown>, status: number, sent: string, allowed?: { status: number; code: string }): string[] {
  if (Array.isArray(parsed.detail)) {
    if (status !== 422 || Object.keys(parsed).join() !== 'detail') return [`${status} with FastAPI's detail list: ${JSON.stringify(parsed).slice(0, 160)}`];
    const bad = (parsed.detail as unknown[]).filter((issue) => {
      const { loc, msg, type } = (issue ?? {}) as { loc?: unknown; msg?: unknown; type?: unknown };
      return !Array.isArray(loc) || typeof msg !== 'string' || msg === '' || typeof type !== 'string';
    });
    return bad.length > 0 || parsed.detail.length === 0 ? [`not FastAPI's issues: ${JSON.stringify(parsed).slice(0, 160)}`] : [];
  }
  if (Object.keys(parsed).sort().join() !== 'body,detail,error,errors') return [`not A1111's error shape: ${JSON.stringify(parsed).slice(0, 160)}`];
  const { error: code, detail } = parsed as { error: unknown; detail: unknown };
  if (typeof code !== 'string' || !isErrorCode(code)) return [`code ${String(code)} is not in the registry`];
  const problems: string[] = [];
  if (ERRORS[code].status !== status) problems.push(`code ${code} is registered as ${ERRORS[code].status}, answered ${status}`);
  if (typeof detail !== 'string' || detail === '') problems.push('the detail is empty');
  else {
    for (const [, name] of ERRORS[code].message.matchAll(/\{(\w+)\}/g)) {
      if (detail.includes(`{${name}}`) && !sent.includes(`{${name}}`)) problems.push(`the detail leaves {${name}} unfilled: ${detail}`);
    }
  }
  if (status >= 500 && !(allowed && allowed.status === status && allowed.code === code)) problems.push(`${status} ${code}: ${detail}`);
  return problems;
}
