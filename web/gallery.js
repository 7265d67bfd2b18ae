// The gpumesh gallery: the newest results, jobs in progress, and a form for new ones.
// Plain DOM, no framework. Every piece of data reaches the page through textContent
// or attributes, never as markup.

import { $, h } from './dom.js';
import { createApi, GrantChanged, wireGrant } from './session.js';

const GRANT_KEY = 'gpumesh.grant';
const PAGE_SIZE = 48;

const ui = {
  connection: $('connection'),
  forget: $('forget'),
  grantPanel: $('grant-panel'),
  grantForm: $('grant-form'),
  grantError: $('grant-error'),
  app: $('app'),
  form: $('submit-form'),
  formError: $('form-error'),
  grid: $('grid'),
  empty: $('empty'),
  loadError: $('load-error'),
  more: $('load-more'),
};

let grant = null;
/**
 * What goes into URLs (images, clips, downloads, the event stream): the page's grant narrowed to reading, for an
 * hour, and renewed before it ends. A URL leaks (history, a copied link, a proxy's log); the grant that may submit
 * stays in this tab.
 */
let linkGrant = null;
let linkTimer = null;
const LINK_GRANT = { actions: ['jobs:read', 'artifacts:read', 'blobs:read'], expires: '1h' };
const LINK_RENEW_MS = 50 * 60_000;
let events = null;
let loaded = false; // the first page of results
let cursor = null; // the next page's
let retryMs = 5_000; // after the event stream is refused

// ---- The grant ------------------------------------------------------------

function askForGrant(message = '') {
  events?.close();
  events = null;
  grant = null;
  sessionStorage.removeItem(GRANT_KEY);
  ui.app.hidden = true;
  ui.forget.hidden = true;
  ui.grantPanel.hidden = false;
  ui.grantError.textContent = message;
  showConnection('idle');
  ui.grantForm.elements.grant.focus();
}

// ---- The API --------------------------------------------------------------

/** A JSON request with the grant; a 401 asks for a new one. */
const api = createApi(() => grant, { onUnauthorized: (message) => askForGrant(message) });

// ---- Formatting -----------------------------------------------------------

const seconds = (ms) => `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;

/** "0.31 s compute · 0.45 s total" */
function timing({ computeMs, totalMs }) {
  const parts = [];
  if (computeMs != null) parts.push(`${seconds(computeMs)} compute`);
  if (totalMs != null) parts.push(`${seconds(totalMs)} total`);
  return parts.join(' · ');
}

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });
const UNITS = [['day', 86_400], ['hour', 3_600], ['minute', 60]];

/** "3 minutes ago"; a clock running ahead of ours never makes it "in 2 seconds". */
function ago(iso) {
  const elapsed = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (elapsed > 30 * 86_400) return new Date(iso).toLocaleDateString();
  for (const [unit, size] of UNITS) if (elapsed >= size) return relative.format(-Math.floor(elapsed / size), unit);
  return relative.format(0, 'second');
}

function timeAgo(iso) {
  return h('time', { datetime: iso, title: new Date(iso).toLocaleString() }, ago(iso));
}

// ---- Cards ----------------------------------------------------------------

/** The image box; its aspect ratio is known before the image loads, so nothing jumps. */
function frame(width, height, ...children) {
  const box = h('div', { class: 'frame' }, ...children);
  if (width && height) box.style.setProperty('--ratio', `${width} / ${height}`);
  return box;
}

function resultCard(artifact) {
  const { prompt, model, width, height } = artifact;
  const img = h('img', {
    src: `${artifact.url}?access_token=${encodeURIComponent(linkGrant)}`,
    alt: prompt ?? `An image by ${model}`,
    width, height, loading: 'lazy', decoding: 'async',
  });
  img.addEventListener('error', () => img.parentElement.classList.add('broken'), { once: true });
  return card(artifact, 'card', img);
}

/** The card around an artifact's media: its frame, then the prompt, who made it and when, and how long it took. */
function card(artifact, className, media) {
  const { jobId, digest, prompt, model, host, width, height, createdAt } = artifact;
  return h('article', { class: className, 'data-job-id': jobId, 'data-digest': digest },
    frame(width, height, media),
    h('div', { class: 'caption' },
      h('p', { class: 'prompt', title: prompt }, prompt ?? 'No prompt'),
      h('p', { class: 'meta' }, h('span', {}, `${model} · ${host}`), timeAgo(createdAt)),
      h('p', { class: 'meta' }, timing(artifact))));
}

/**
 * A clip: its poster until it plays, then the MP4 in a <video>, which fetches it by range requests (the blob
 * route answers 206), so it starts before the whole file has arrived.
 */
function videoCard(artifact, poster) {
  const { prompt, model, width, height } = artifact;
  const token = `?access_token=${encodeURIComponent(linkGrant)}`;
  const video = h('video', {
    src: `${artifact.url}${token}`, poster: poster ? `${poster.url}${token}` : null,
    width, height, controls: true, loop: true, playsinline: true, preload: 'metadata',
    'aria-label': prompt ? `A clip of ${prompt}` : `A clip by ${model}`,
  });
  // Muted, so a browser lets it play without a gesture of its own.
  video.muted = true;
  video.addEventListener('error', () => video.parentElement.classList.add('broken'), { once: true });
  return card(artifact, 'card video', video);
}

/**
 * An output that is neither an image nor a clip (JSON, text): offered as a download, never shown in the page — the
 * blob route serves it as an attachment, with nosniff and a sandboxing CSP.
 */
function fileCard(artifact) {
  const { digest, mediaType, bytes } = artifact;
  const link = h('a', { class: 'download', href: `${artifact.url}?access_token=${encodeURIComponent(linkGrant)}`, download: '', rel: 'noopener' },
    `Download ${mediaType}${bytes != null ? ` (${bytes} bytes)` : ''}`);
  link.title = digest;
  return card(artifact, 'card file', link);
}

/** A clip's poster is shown by its video's card, not as a card of its own. */
const isPoster = (artifact) => artifact.type === 'video' && artifact.mediaType.startsWith('image/');

/** Cards for results: one per image, one per clip (with its poster, when it is among them), one per other file. */
function cardsFor(artifacts) {
  return artifacts.filter((artifact) => !isPoster(artifact)).map((artifact) => {
    if (artifact.mediaType.startsWith('image/')) return resultCard(artifact);
    if (!artifact.mediaType.startsWith('video/')) return fileCard(artifact);
    return videoCard(artifact, artifacts.find((other) => other.jobId === artifact.jobId && isPoster(other)));
  });
}

/** A job in progress: what is known of it, its state and a progress bar. */
function pendingCard({ jobId, prompt, width, height, jobType, state = 'queued', label = 'Queued' }) {
  return h('article', { class: 'card pending', 'data-job-id': jobId, 'data-state': state, 'data-type': jobType, 'aria-busy': 'true' },
    frame(width, height,
      h('p', { class: 'state' }, label),
      h('progress', { max: 100, 'aria-label': 'Progress' })),
    h('div', { class: 'caption' },
      h('p', { class: 'prompt', title: prompt }, prompt ?? '…'),
      h('p', { class: 'meta' }, h('span', { class: 'where' }))));
}

/** Fill in what a placeholder did not know yet. */
function fillIn(card, { prompt, model, host, jobType }) {
  const promptText = card.querySelector('.prompt');
  if (prompt && promptText.textContent === '…') {
    promptText.textContent = prompt;
    promptText.title = prompt;
  }
  if (model) card.dataset.model = model;
  if (host) card.dataset.host = host;
  if (jobType) card.dataset.type = jobType;
  card.querySelector('.where').textContent = [card.dataset.model, card.dataset.host].filter(Boolean).join(' · ');
}

function setState(card, state, label, pct) {
  if (!card) return;
  card.dataset.state = state;
  card.querySelector('.state').textContent = label;
  const bar = card.querySelector('progress');
  if (pct == null) bar?.removeAttribute('value');
  else if (bar) bar.value = pct;
}

// ---- The grid -------------------------------------------------------------

const cardsOf = (jobId) => [...ui.grid.querySelectorAll(`[data-job-id="${CSS.escape(jobId)}"]`)];
const pendingOf = (jobId) => cardsOf(jobId).find((card) => card.classList.contains('pending'));
const shown = (artifact) => cardsOf(artifact.jobId).some((card) => card.dataset.digest === artifact.digest);

/** A job's results: they take its placeholder's place, or go first. */
function showResults(jobId, artifacts) {
  const cards = cardsFor(artifacts.filter((artifact) => !shown(artifact)));
  const placeholder = pendingOf(jobId);
  if (placeholder) placeholder.replaceWith(...cards);
  else ui.grid.prepend(...cards);
}

/** The placeholder of a job in progress, made on first sight and told what is `known`; none once the job has results. */
function placeholder(jobId, known = {}) {
  if (cardsOf(jobId).length) {
    const card = pendingOf(jobId);
    if (card) fillIn(card, known);
    return card ?? null;
  }
  const card = pendingCard({ jobId, ...known });
  fillIn(card, known);
  ui.grid.prepend(card);
  // Events other than `queued` do not carry the prompt; the job does.
  if (!known.prompt) api(`/v1/jobs/${encodeURIComponent(jobId)}`).then(applyJob, () => {});
  return card;
}

/** A job that ended without results: say why, and let it be dismissed. */
function finish(jobId, state, label, message) {
  const card = pendingOf(jobId);
  if (!card || card.dataset.state === state) return;
  setState(card, state, label, 0);
  card.removeAttribute('aria-busy');
  card.querySelector('progress').remove();
  const dismiss = h('button', { class: 'dismiss quiet', type: 'button', 'aria-label': 'Dismiss' }, '×');
  dismiss.addEventListener('click', () => card.remove());
  card.querySelector('.caption').append(message ? h('p', { class: 'error' }, message) : '', dismiss);
}

const STATUS_LABELS = { queued: 'Queued', dispatched: 'Dispatched', running: 'Running' };
/** The job types whose results the gallery shows. */
const SHOWN_TYPES = new Set(['image', 'video']);

/** Bring the page in line with a job as the API describes it. */
function applyJob(job) {
  if (!SHOWN_TYPES.has(job.type)) return pendingOf(job.id)?.remove();
  if (job.status === 'succeeded') return showResults(job.id, job.artifacts);
  if (job.status === 'failed') return finish(job.id, 'failed', 'Failed', job.error?.message);
  if (job.status === 'cancelled' || job.status === 'expired') return onEvent[job.status]({ jobId: job.id });
  const { prompt, width, height } = job.input;
  const known = { prompt, width, height, jobType: job.type, model: job.model, host: job.attempts.at(-1)?.host };
  placeholder(job.id, { ...known, state: job.status, label: STATUS_LABELS[job.status] });
}

/** Results the page missed while it was not listening: newest first, in place of their placeholders. */
async function catchUp() {
  if (loaded) {
    const { artifacts } = await api(`/v1/artifacts?limit=${PAGE_SIZE}`);
    // A clip's poster travels with its video (the page is newest first, and a job's files are published together).
    for (const artifact of artifacts.reverse()) {
      if (!isPoster(artifact)) showResults(artifact.jobId, [artifact, ...artifacts.filter((other) => other.jobId === artifact.jobId && isPoster(other))]);
    }
  } else {
    await loadMore();
  }
  const waiting = ui.grid.querySelectorAll('.pending[aria-busy][data-job-id]');
  await Promise.all(Array.from(waiting, (card) => api(`/v1/jobs/${encodeURIComponent(card.dataset.jobId)}`).then(applyJob)));
}

async function loadMore() {
  ui.more.disabled = true;
  try {
    const page = await api(`/v1/artifacts?limit=${PAGE_SIZE}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    ui.grid.append(...cardsFor(page.artifacts.filter((artifact) => !shown(artifact))));
    cursor = page.nextCursor;
    loaded = true;
    ui.loadError.textContent = '';
    ui.empty.hidden = false;
  } catch (error) {
    if (!(error instanceof GrantChanged)) ui.loadError.textContent = `Could not load results: ${error.message}`;
  } finally {
    ui.more.disabled = false;
    ui.more.hidden = !cursor;
  }
}

/** Jobs that were already under way when the page opened. */
async function loadInProgress() {
  const { jobs } = await api('/v1/jobs?status=queued,dispatched,running&limit=100');
  for (const job of jobs.reverse()) applyJob(job);
}

// ---- Live events ----------------------------------------------------------

const onEvent = {
  queued: ({ jobId, jobType, model, prompt }) => SHOWN_TYPES.has(jobType) && placeholder(jobId, { jobType, model, prompt: prompt ?? undefined }),
  dispatched: ({ jobId, host, attempt }) =>
    setState(placeholder(jobId, { host }), 'dispatched', attempt > 1 ? `Retrying (attempt ${attempt})` : 'Dispatched'),
  // A model made resident for the job (a server started from zero): said while it lasts.
  loading: ({ jobId, host, loadMs }) => loadMs === undefined && setState(placeholder(jobId, { host }), 'dispatched', 'Loading the model'),
  running: ({ jobId, host }) => setState(placeholder(jobId, { host }), 'running', 'Running'),
  progress: ({ jobId, step, total, pct }) => {
    const card = placeholder(jobId);
    // A clip's progress counts frames.
    setState(card, 'running', `${card?.dataset.type === 'video' ? 'Frame' : 'Step'} ${step} of ${total}`, pct);
  },
  succeeded: ({ jobId, artifacts }) => showResults(jobId, artifacts),
  failed: ({ jobId, error }) => finish(jobId, 'failed', 'Failed', error.message),
  cancelled: ({ jobId }) => finish(jobId, 'cancelled', 'Cancelled'),
  expired: ({ jobId }) => finish(jobId, 'expired', 'Expired', 'The job passed its deadline.'),
};

const CONNECTION_LABELS = { idle: '', connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…', offline: 'Offline' };

function showConnection(state) {
  ui.connection.dataset.state = state;
  ui.connection.textContent = CONNECTION_LABELS[state];
}

/**
 * Follow every job event the grant may see. EventSource reconnects by itself
 * after a dropped connection and sends Last-Event-ID, so the server replays
 * what was missed — or, when it cannot (it restarted), sends `resync` and the
 * page catches up from the API. A new EventSource (after a refusal) starts
 * without an id, so it catches up from the API too.
 */
function connect({ missed = false } = {}) {
  const source = new EventSource(`/v1/events?access_token=${encodeURIComponent(linkGrant)}`);
  events = source;
  showConnection(missed ? 'reconnecting' : 'connecting');
  source.addEventListener('open', () => {
    showConnection('live');
    retryMs = 5_000;
    if (missed) catchUp().catch(() => {});
    missed = false;
  });
  source.addEventListener('resync', () => catchUp().catch(() => {}));
  // The link grant ended (it is renewed before it does; a sleeping laptop may miss that): renew it and follow again.
  source.addEventListener('grant:ended', () => {
    source.close();
    if (events === source) renewLinkGrant().then(() => events === source && connect({ missed: true })).catch(() => {});
  });
  source.addEventListener('error', () => {
    if (source.readyState !== EventSource.CLOSED) return showConnection('reconnecting');
    // Refused outright (a server shutting down, a grant refused): EventSource gives up, so
    // try again later, unless the grant turns out to be no good (api() then asks for another).
    showConnection('offline');
    setTimeout(() => {
      if (events === source) api('/v1/artifacts?limit=1').catch(() => {}).then(() => events === source && connect({ missed: true }));
    }, retryMs);
    retryMs = Math.min(retryMs * 2, 60_000);
  });
  for (const [type, handle] of Object.entries(onEvent)) {
    source.addEventListener(type, (message) => handle(JSON.parse(message.data)));
  }
}

// ---- The form -------------------------------------------------------------

function readForm() {
  const data = new FormData(ui.form);
  const size = Number(data.get('size'));
  const input = { prompt: data.get('prompt'), width: size, height: size };
  for (const name of ['seed', 'steps']) {
    const value = data.get(name).trim();
    if (value !== '') input[name] = Number(value);
  }
  return input;
}

/** Submit a job; its placeholder appears at once, and the form keeps what was typed whatever happens. */
async function submit(event) {
  event.preventDefault();
  const input = readForm();
  const button = ui.form.querySelector('button[type=submit]');
  const card = pendingCard({ ...input, state: 'submitting', label: 'Submitting…' });
  ui.grid.prepend(card);
  ui.formError.textContent = '';
  button.disabled = true;
  try {
    const { id } = await api('/v1/jobs', { method: 'POST', json: { type: 'image', input } });
    // Its events may have come first and made a card of their own.
    const existing = cardsOf(id);
    if (existing.length) {
      card.remove();
      if (existing[0].classList.contains('pending')) fillIn(existing[0], input);
    } else {
      card.dataset.jobId = id;
      setState(card, 'queued', 'Queued');
    }
  } catch (error) {
    card.remove();
    if (!(error instanceof GrantChanged)) ui.formError.textContent = error.message;
  } finally {
    button.disabled = false;
  }
}

// ---- Start ----------------------------------------------------------------

/** A fresh read-only link grant; the next renewal is scheduled. */
async function renewLinkGrant() {
  const { token } = await api('/v1/grants:narrow', { method: 'POST', json: LINK_GRANT });
  linkGrant = token;
  clearTimeout(linkTimer);
  linkTimer = setTimeout(() => renewLinkGrant().catch(() => {}), LINK_RENEW_MS);
}

async function start(value) {
  events?.close();
  grant = value;
  linkGrant = null;
  try {
    await renewLinkGrant();
  } catch (error) {
    // A grant that is no good has already brought the grant form back (api() on a 401).
    if (error instanceof GrantChanged || error.status === 401) return;
    // An orchestrator that narrows no grants (older than the route), or not reachable now: the page's own grant.
    linkGrant = value;
  }
  if (grant !== value) return;
  loaded = false;
  cursor = null;
  ui.grid.replaceChildren();
  ui.grantPanel.hidden = true;
  ui.app.hidden = false;
  ui.forget.hidden = false;
  ui.empty.hidden = true;
  connect();
  loadMore();
  loadInProgress().catch(() => {});
}

ui.form.addEventListener('submit', submit);
ui.more.addEventListener('click', loadMore);
setInterval(() => {
  for (const time of ui.grid.querySelectorAll('time')) time.textContent = ago(time.dateTime);
}, 30_000);

wireGrant({ key: GRANT_KEY, forget: ui.forget, form: ui.grantForm, start, ask: askForGrant, current: () => grant });
