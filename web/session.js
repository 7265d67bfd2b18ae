// The page's grant and its requests to the orchestrator, shared by the gallery and the mesh view.
// The grant arrives in the URL fragment (never sent to a server, never in its logs), is kept in this tab's
// sessionStorage for reloads, and is then hidden from the address bar.

/** A grant from `#grant=…` in a link or pasted text, else the text itself. */
export function grantIn(text) {
  const match = /(?:^|[#&])grant=([^&\s]+)/.exec(text);
  return match ? decodeURIComponent(match[1]) : text.trim();
}

/** The grant from the URL fragment (kept under `key` for reloads, then hidden from the address bar) or from this tab's session. */
export function takeGrant(key) {
  if (location.hash.includes('grant=')) {
    sessionStorage.setItem(key, grantIn(location.hash));
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem(key);
}

/**
 * The grant controls both pages have, and their start: "forget" asks for a new grant; a grant or link pasted into
 * the form, or a new link pasted into the address bar, starts the page with it (kept in this tab's session under
 * `key`); the page starts with the grant it was opened with, or asks for one.
 */
export function wireGrant({ key, forget, form, start, ask, current }) {
  forget.addEventListener('click', () => ask());
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const value = grantIn(form.elements.grant.value);
    form.reset();
    sessionStorage.setItem(key, value);
    start(value);
  });
  window.addEventListener('hashchange', () => {
    const value = takeGrant(key);
    if (value && value !== current()) start(value);
  });
  const initial = takeGrant(key);
  if (initial) start(initial);
  else ask();
}

/** The orchestrator's `{ error: { code, message } }`, with the HTTP status (0: the orchestrator could not be reached). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * The answer to a request made with a grant the page has since replaced: it belongs to the old grant, so it is
 * neither shown nor taken as a verdict on the new one (a late 401 for a mistyped grant must not undo a good one).
 */
export class GrantChanged extends ApiError {
  constructor() {
    super(0, 'GRANT_CHANGED', 'The grant changed while this request was under way.');
  }
}

/**
 * A JSON request with the grant `grant()` returns; a failure throws an ApiError, and an answer that arrives after
 * the grant changed throws GrantChanged. `onUnauthorized` runs on a 401 (the grant itself is no good: invalid,
 * expired, revoked; only a new one helps) before the error is thrown.
 */
export function createApi(grant, { onUnauthorized } = {}) {
  return async function api(path, { method = 'GET', json } = {}) {
    const sentWith = grant();
    const headers = { authorization: `Bearer ${sentWith}` };
    if (json !== undefined) headers['content-type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, { method, headers, body: json === undefined ? undefined : JSON.stringify(json) });
    } catch {
      throw grant() === sentWith ? new ApiError(0, 'UNREACHABLE', 'Cannot reach the orchestrator. Is it running?') : new GrantChanged();
    }
    const body = await response.json().catch(() => null);
    if (grant() !== sentWith) throw new GrantChanged();
    if (response.ok) return body;
    const error = new ApiError(response.status, body?.error?.code ?? `HTTP_${response.status}`, body?.error?.message ?? `${response.status} ${response.statusText}`);
    if (response.status === 401) onUnauthorized?.(error.message);
    throw error;
  };
}
