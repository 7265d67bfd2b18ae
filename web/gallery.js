// The gpumesh gallery: the newest results, jobs in progress, and a form for new ones; a detail view of each result
// (detail.js) with "again", variations and delete; albums to switch between and a search by prompt.
// Plain DOM, no framework. Every piece of data reaches the page through textContent
// or attributes, never as markup.

import { createDetail } from './detail.js';
import { $, h } from './dom.js';
import { createApi, GrantChanged, wireGrant } from './session.js';

const GRANT_KEY = 'gpumesh.grant';
const PAGE_SIZE = 48;
/** Cards show a thumbnail this wide (the orchestrator makes it once, with sharp): sharp on a 2× screen at card size. */
const THUMB_WIDTH = 512;
const VARIATIONS = 4;
const SEARCH_DELAY_MS = 250;

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
  album: $('album'),
  albumField: $('album').closest('.field'),
  search: $('search'),
  detail: $('detail'),
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
let loading = null; // the page being loaded, if one is
let retryMs = 5_000; // after the event stream is refused
/** What the grid shows: one album ('' for all the grant may see) and prompts holding `query`. */
const filter = { album: '', query: '' };
/** From GET /v1/gallery: the albums to switch between, and what this grant may do. */
const GALLERY_UNKNOWN = { albums: [], defaultAlbum: 'default', may: { submit: true, delete: false } };
let gallery = GALLERY_UNKNOWN;

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

/** A URL of the API with the read-only link grant, for what the browser fetches by itself (<img>, <video>, downloads). */
const withLinkGrant = (url) => `${url}${url.includes('?') ? '&' : '?'}access_token=${encodeURIComponent(linkGrant)}`;
const thumbnailOf = (artifact) => withLinkGrant(`/v1/blobs/${artifact.digest}/thumbnail?width=${THUMB_WIDTH}`);

/** An image's card: its thumbnail (not the full file), which opens the detail view. */
function resultCard(artifact) {
  const { prompt, model, width, height } = artifact;
  const img = h('img', {
    src: thumbnailOf(artifact),
    alt: prompt ?? `An image by ${model}`,
    width, height, loading: 'lazy', decoding: 'async',
  });
  img.addEventListener('error', () => img.closest('.frame').classList.add('broken'), { once: true });
  const open = h('button', { class: 'open', type: 'button', 'aria-label': `Details: ${prompt ?? `an image by ${model}`}` }, img);
  return card(artifact, 'card', open);
}

/** The card around an artifact's media: its frame, then the prompt, who made it and when, and how long it took. */
function card(artifact, className, media) {
  const { jobId, digest, prompt, model, host, width, height, createdAt } = artifact;
  return h('article', { class: className, 'data-job-id': jobId, 'data-digest': digest, 'data-album': artifact.album },
    frame(width, height, media),
    h('div', { class: 'caption' },
      h('p', { class: 'prompt', title: prompt }, prompt ?? 'No prompt'),
      h('p', { class: 'meta' }, h('span', {}, `${model} · ${host}`), timeAgo(createdAt)),
      h('p', { class: 'meta' }, h('span', {}, timing(artifact)),
        className === 'card' ? '' : h('button', { class: 'quiet details', type: 'button', 'aria-label': `Details: ${prompt ?? model}` }, 'Details'))));
}

/**
 * A clip: its poster until it plays, then the MP4 in a <video>, which fetches it by range requests (the blob
 * route answers 206), so it starts before the whole file has arrived.
 */
function videoCard(artifact, poster) {
  const { prompt, model, width, height } = artifact;
  const video = h('video', {
    src: withLinkGrant(artifact.url), poster: poster ? thumbnailOf(poster) : null,
    width, height, controls: true, loop: true, playsinline: true, preload: 'metadata',
    'aria-label': prompt ? `A clip of ${prompt}` : `A clip by ${model}`,
  });
  // Muted, so a browser lets it play without a gesture of its own.
  video.muted = true;
  video.addEventListener('error', () => video.closest('.frame').classList.add('broken'), { once: true });
  return card(artifact, 'card video', video);
}

/**
 * An output that is neither an image nor a clip (JSON, text): offered as a download, never shown in the page — the
 * blob route serves it as an attachment, with nosniff and a sandboxing CSP.
 */
function fileCard(artifact) {
  const { digest, mediaType, bytes } = artifact;
  const link = h('a', { class: 'download', href: withLinkGrant(artifact.url), download: '', rel: 'noopener' },
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

/** Whether a result belongs in the grid as filtered now (album, search). */
function matches(artifact) {
  if (filter.album && artifact.album !== filter.album) return false;
  return !filter.query || (artifact.prompt ?? '').toLowerCase().includes(filter.query.toLowerCase());
}

/** A job's results: they take its placeholder's place, or go first (those the grid's filter leaves out: neither). */
function showResults(jobId, artifacts) {
  const cards = cardsFor(artifacts.filter((artifact) => !shown(artifact) && matches(artifact)));
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
    const { artifacts } = await api(listing(null));
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

/** The listing's URL: a page of the grid's filter, before `after` (a cursor) or from the newest. */
function listing(after) {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (after) params.set('cursor', after);
  if (filter.album) params.set('album', filter.album);
  if (filter.query) params.set('q', filter.query);
  return `/v1/artifacts?${params}`;
}

/** The next page (keyset: the cursor names the last result shown, so page 200 costs what page 1 does). */
function loadMore() {
  loading ??= (async () => {
    ui.more.disabled = true;
    const asked = { ...filter };
    try {
      const page = await api(listing(cursor));
      // The filter changed while the page was on its way: it is another listing's page.
      if (asked.album !== filter.album || asked.query !== filter.query) return;
      ui.grid.append(...cardsFor(page.artifacts.filter((artifact) => !shown(artifact))));
      cursor = page.nextCursor;
      loaded = true;
      ui.loadError.textContent = '';
      ui.empty.hidden = false;
      ui.empty.textContent = filter.query ? `No results whose prompt holds “${filter.query}”.` : 'Nothing here yet. Describe a picture or a clip above and it appears here.';
    } catch (error) {
      if (!(error instanceof GrantChanged)) ui.loadError.textContent = `Could not load results: ${error.message}`;
    } finally {
      ui.more.disabled = false;
      ui.more.hidden = !cursor;
      loading = null;
    }
  })();
  return loading;
}

/** Start the grid again from the newest result of the filter now in force (an album switched, a search typed). */
function relist() {
  loaded = false;
  cursor = null;
  loading = null;
  ui.grid.querySelectorAll('.card:not(.pending)').forEach((card) => card.remove());
  return loadMore();
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
  succeeded: ({ jobId, artifacts }) => {
    showResults(jobId, artifacts);
    notifyEnd(jobId, 'is ready');
  },
  failed: ({ jobId, error }) => {
    finish(jobId, 'failed', 'Failed', error.message);
    notifyEnd(jobId, `failed: ${error.message}`);
  },
  cancelled: ({ jobId }) => finish(jobId, 'cancelled', 'Cancelled'),
  expired: ({ jobId }) => finish(jobId, 'expired', 'Expired', 'The job passed its deadline.'),
};

// ---- Notifications --------------------------------------------------------

/** Jobs this page submitted while "Tell me when it is done" was on, with their prompts: each ends in a notification. */
const notifying = new Map();
/** How the jobs that ended lately ended: a small job's end can come over the event stream before its submit answers. */
const endedLately = new Map();
const ENDED_KEPT = 200;

/** Remember a job to notify of, when the person asked for notifications and the browser allows them. */
function notifyOf(jobId, prompt = ui.form.prompt.value) {
  if (!ui.form.notify.checked || typeof Notification === 'undefined' || Notification.permission !== 'granted') return;
  notifying.set(jobId, prompt);
  if (endedLately.has(jobId)) notifyEnd(jobId, endedLately.get(jobId));
}

/** The job ended: an ordinary Web Notification (the page is open; nothing is pushed from the server). */
function notifyEnd(jobId, how) {
  endedLately.set(jobId, how);
  if (endedLately.size > ENDED_KEPT) endedLately.delete(endedLately.keys().next().value);
  if (!notifying.has(jobId)) return;
  const prompt = notifying.get(jobId);
  notifying.delete(jobId);
  const notification = new Notification(`Your job ${how}`, { body: prompt, tag: jobId });
  notification.addEventListener('click', () => window.focus());
}

// Asked once, when the person ticks the box: the browser asks them, and a refusal unticks it with the reason.
ui.form.notify.addEventListener('change', async () => {
  if (!ui.form.notify.checked) return;
  const permission = typeof Notification === 'undefined' ? 'unsupported' : await Notification.requestPermission();
  if (permission === 'granted') return;
  ui.form.notify.checked = false;
  ui.formError.textContent = permission === 'unsupported' ? 'This browser shows no notifications.' : 'The browser will not show notifications from this page (its settings allow or block them).';
});

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

/** The form's job: an image, or a clip with its frames and frames per second. */
function readForm() {
  const data = new FormData(ui.form);
  const type = data.get('type');
  const size = Number(data.get('size'));
  const input = { prompt: data.get('prompt'), width: size, height: size };
  for (const name of type === 'video' ? ['seed', 'steps', 'frames', 'fps'] : ['seed', 'steps']) {
    const value = data.get(name).trim();
    if (value !== '') input[name] = Number(value);
  }
  return { type, input };
}

/** The clip's own fields show only when a clip is asked for. */
function showTypeFields() {
  const video = ui.form.elements.type.value === 'video';
  for (const field of ui.form.querySelectorAll('[data-for="video"]')) field.hidden = !video;
  ui.form.querySelector('button[type=submit]').textContent = video ? 'Make the clip' : 'Generate';
}

/** The album new jobs go to: the one shown, or the grant's default when all are. */
const targetAlbum = () => filter.album || gallery.defaultAlbum;

/** Fill the form with a job's parameters (its seed too, so the same picture comes back), and go there. */
function reuse(job) {
  const form = ui.form.elements;
  form.type.value = job.type === 'video' ? 'video' : 'image';
  showTypeFields();
  form.prompt.value = job.input.prompt ?? '';
  form.seed.value = job.input.seed ?? '';
  form.steps.value = job.input.steps ?? '';
  if (job.input.width && [...form.size.options].some((option) => option.value === String(job.input.width))) form.size.value = String(job.input.width);
  if (job.type === 'video') {
    form.frames.value = job.input.frames ?? form.frames.value;
    form.fps.value = job.input.fps ?? form.fps.value;
  }
  ui.form.scrollIntoView({ block: 'start' });
  form.prompt.focus();
}

/** Submit a job; its placeholder appears at once, and the form keeps what was typed whatever happens. */
async function submit(event) {
  event.preventDefault();
  const { type, input } = readForm();
  const button = ui.form.querySelector('button[type=submit]');
  const card = pendingCard({ ...input, jobType: type, state: 'submitting', label: 'Submitting…' });
  ui.grid.prepend(card);
  ui.formError.textContent = '';
  button.disabled = true;
  try {
    const { id } = await api('/v1/jobs', { method: 'POST', json: { type, input, album: targetAlbum() } });
    notifyOf(id);
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

// ---- The detail view ------------------------------------------------------

/** The same job with a new seed (the pipeline draws one): a sibling, not a copy. */
const sibling = (job) => {
  const { seed: _seed, ...input } = job.input;
  return { type: job.type, model: job.model, album: job.album, input };
};

const detail = createDetail(ui.detail, {
  url: withLinkGrant,
  mayDelete: () => gallery.may.delete,
  maySubmit: () => gallery.may.submit,
  async again(job) {
    notifyOf((await api('/v1/jobs', { method: 'POST', json: sibling(job) })).id, job.input.prompt);
  },
  /** A clip that starts from the picture: the picture job's first output, by reference, made where clips are made. */
  async animate(job) {
    const { prompt, width, height } = job.input;
    const input = { prompt, width, height, frames: 24, fps: 8, image: { fromJob: job.id, output: 0 } };
    notifyOf((await api('/v1/jobs', { method: 'POST', json: { type: 'video', album: job.album, input } })).id, prompt);
  },
  async variations(job) {
    const { results } = await api('/v1/jobs:batch', { method: 'POST', json: { jobs: Array.from({ length: VARIATIONS }, () => sibling(job)) } });
    const refused = results.find((result) => result.error);
    if (refused) throw new Error(refused.error.message);
    return results.length;
  },
  reuse,
  async remove(job) {
    await api(`/v1/jobs/${encodeURIComponent(job.id)}/artifacts`, { method: 'DELETE' });
    for (const card of cardsOf(job.id)) card.remove();
  },
  go: (step) => go(step),
});

/** The result cards in grid order (a clip is one card). */
const resultCards = () => [...ui.grid.querySelectorAll('.card[data-digest]')];

/** Open the detail view of a card's job. */
async function openDetail(card, from = null) {
  const job = await api(`/v1/jobs/${encodeURIComponent(card.dataset.jobId)}`);
  const artifact = job.artifacts.find((entry) => entry.digest === card.dataset.digest) ?? job.artifacts[0];
  if (!artifact) throw new Error('This result was deleted.');
  detail.show(job, artifact, from);
}

/** Move the detail view to the next (1) or previous (-1) result in the grid, loading the next page at its end. */
async function go(step) {
  const cards = resultCards();
  const at = cards.findIndex((card) => card.dataset.jobId === detail.job?.id);
  if (at + step >= cards.length && cursor) await loadMore();
  const next = resultCards()[at + step];
  if (next) await openDetail(next).catch(() => {});
}

ui.grid.addEventListener('click', (event) => {
  const button = event.target.closest('button.open, button.details');
  if (!button) return;
  openDetail(button.closest('.card'), button).catch((error) => {
    if (!(error instanceof GrantChanged)) ui.loadError.textContent = error.message;
  });
});

// ---- Albums and search ----------------------------------------------------

/** The album switcher, for a grant that may see more than one. */
function showAlbums() {
  const many = gallery.albums.length > 1;
  ui.albumField.hidden = !many;
  ui.album.replaceChildren(
    h('option', { value: '' }, 'All albums'),
    ...gallery.albums.map((name) => h('option', { value: name }, name)));
  ui.album.value = gallery.albums.includes(filter.album) ? filter.album : '';
}

ui.album.addEventListener('change', () => {
  filter.album = ui.album.value;
  relist();
});

let searchTimer = null;
ui.search.addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    const query = ui.search.value.trim();
    if (query === filter.query) return;
    filter.query = query;
    relist();
  }, SEARCH_DELAY_MS);
});

// More results as the end of the grid comes into view; the button stays for the keyboard.
new IntersectionObserver((entries) => {
  if (entries.some((entry) => entry.isIntersecting) && cursor && !loading && grant) loadMore();
}, { rootMargin: '600px' }).observe(ui.more);

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
  loading = null;
  filter.album = '';
  filter.query = '';
  ui.search.value = '';
  detail.close();
  ui.grid.replaceChildren();
  gallery = GALLERY_UNKNOWN;
  try {
    gallery = await api('/v1/gallery');
  } catch (error) {
    if (error instanceof GrantChanged || error.status === 401) return;
    // An orchestrator older than the route: one album, and no delete.
  }
  if (grant !== value) return;
  showAlbums();
  ui.grantPanel.hidden = true;
  ui.app.hidden = false;
  ui.forget.hidden = false;
  ui.empty.hidden = true;
  connect();
  loadMore();
  loadInProgress().catch(() => {});
}

ui.form.addEventListener('submit', submit);
ui.form.elements.type.addEventListener('change', showTypeFields);
ui.more.addEventListener('click', loadMore);
setInterval(() => {
  for (const time of ui.grid.querySelectorAll('time')) time.textContent = ago(time.dateTime);
}, 30_000);

wireGrant({ key: GRANT_KEY, forget: ui.forget, form: ui.grantForm, start, ask: askForGrant, current: () => grant });
