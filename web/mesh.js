// The gpumesh mesh view: hosts, devices and their memory, resident models, breakers, health, queues and jobs in
// flight, live. Plain DOM, no framework; data reaches the page through textContent and attributes, never as markup.
//
// What it shows comes from GET /v1/hosts, /v1/status and /v1/jobs (jobs in flight). Events on /v1/events say that
// something changed; the page then reloads those three, debounced (one reload at a time, at most one every
// REFRESH_GAP_MS however many events arrive), plus a slow reload for what only heartbeats carry (memory in use
// during a batch, a host falling late).

import { $, h } from './dom.js';
import { createPlots } from './plots.js';
import { createReloader } from './reloader.js';
import { createApi, GrantChanged, wireGrant } from './session.js';
import { watthours } from './units.js';

const GRANT_KEY = 'gpumesh.mesh-grant';
const REFRESH_DELAY_MS = 150; // lets a burst of events settle into one reload
const REFRESH_GAP_MS = 500; // the least time between two reloads
const SLOW_REFRESH_MS = 15_000;
/** A model loaded or unloaded: memory in use reaches the orchestrator with the host's next heartbeat (every 2 s by default). */
const AFTER_HEARTBEAT_MS = 2_500;
const ACTIVITY_ITEMS = 50;
const JOBS_SHOWN_PER_HOST = 8;
/** The orchestrator adds a point to its series every 5 s; the plots follow. */
const SERIES_EVERY_MS = 5_000;

/** Every event the view listens to: all but `progress`, which changes nothing it shows and is the most frequent. */
const JOB_EVENTS = ['waiting', 'queued', 'dispatched', 'loading', 'running', 'succeeded', 'failed', 'cancelled', 'expired'];
const MESH_EVENTS = [
  'host:joined', 'host:lost', 'host:draining', 'host:away', 'host:back', 'host:left', 'replica:loaded', 'replica:unloaded', 'replica:refused',
  'link:refused', 'blob:corrupt', 'breaker:opened', 'breaker:half-open', 'breaker:closed',
];

const ui = {
  connection: $('connection'),
  updated: $('updated'),
  forget: $('forget'),
  grantPanel: $('grant-panel'),
  grantForm: $('grant-form'),
  grantError: $('grant-error'),
  app: $('app'),
  loadError: $('load-error'),
  summary: $('summary'),
  hosts: $('hosts'),
  noHosts: $('no-hosts'),
  queues: $('queues').tBodies[0],
  activity: $('activity'),
  plots: $('plots'),
  noActivity: $('no-activity'),
};

let grant = null;
let events = null;
let retryMs = 5_000;
/** Why each host was lost, from its `host:lost` event (the host list says when, not why). */
const lostReasons = new Map();

// ---- The grant ------------------------------------------------------------

function askForGrant(message = '') {
  events?.close();
  events = null;
  grant = null;
  refresher.stop();
  sessionStorage.removeItem(GRANT_KEY);
  ui.app.hidden = true;
  ui.forget.hidden = true;
  ui.grantPanel.hidden = false;
  ui.grantError.textContent = message;
  ui.updated.textContent = '';
  showConnection('idle');
  ui.grantForm.elements.grant.focus();
}

// ---- The API --------------------------------------------------------------

/** A JSON request with the grant; the reload that made it says what a 401 or 403 means here. */
const api = createApi(() => grant);

// ---- Formatting -----------------------------------------------------------

const number = new Intl.NumberFormat();
const mb = (value) => `${number.format(Math.round(value))} MB`;
const plural = (n, one, many = `${one}s`) => `${number.format(n)} ${n === 1 ? one : many}`;

/** "4 s", "3 min", "2 h": how long ago, or how long until, an instant. */
function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return `${s} s`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

/** A <time> that keeps saying how long ago (or until) it is; the ticker below updates it. */
function clock(iso, { until = false, prefix = '', suffix = '' } = {}) {
  const element = h('time', { datetime: iso, title: new Date(iso).toLocaleString(), 'data-relative': until ? 'until' : 'ago', 'data-prefix': prefix, 'data-suffix': suffix });
  tickOne(element);
  return element;
}

function tickOne(element) {
  const at = Date.parse(element.dateTime);
  const text = element.dataset.relative === 'until' ? (at > Date.now() ? `in ${span(at - Date.now())}` : 'now') : `${span(Date.now() - at)} ago`;
  element.textContent = `${element.dataset.prefix}${text}${element.dataset.suffix}`;
}

// ---- Pieces ---------------------------------------------------------------

/** A replica's breaker: closed is the good state, which the word alone does not say. */
const BREAKER_LABELS = { closed: 'ok', open: 'open', 'half-open': 'half-open' };

/** A breaker's state as a badge: open ones say until when, and the failure that opened them. */
function breakerBadge(breaker, what) {
  const badge = h('span', { class: 'breaker', 'data-state': breaker.state, title: breaker.lastFailure ? `last failure: ${breaker.lastFailure}` : null },
    h('span', { class: 'visually-hidden' }, `${what} breaker `), BREAKER_LABELS[breaker.state] ?? breaker.state);
  if (breaker.state === 'open' && breaker.openUntil) badge.append(' · trial ', clock(breaker.openUntil, { until: true }));
  if (breaker.state === 'half-open') badge.append(` · ${breaker.trialSuccesses} trial${breaker.trialSuccesses === 1 ? '' : 's'} ok`);
  return badge;
}

/**
 * What state a host is in: gone (left on purpose after draining, or lost), draining, late (heartbeats overdue),
 * healthy. A host that drained and left did what it was asked: grey, not the red of a lost one.
 */
function hostState(host) {
  // A host that said it went to sleep is asleep (work for it may wake it), not lost.
  if (!host.connected) return host.away?.state === 'asleep' ? 'asleep' : host.left ? 'left' : 'lost';
  if (host.draining) return 'draining';
  if (host.health === 'late') return 'late';
  // Linked and well, and taking no work now: its owner's (yielded), outside its hours, too hot. Not failed, not lost.
  if (host.away) return host.away.state;
  return 'healthy';
}

const HOST_STATE_LABELS = {
  left: 'left (drained)', lost: 'Lost', draining: 'Draining', late: 'Late', healthy: 'Healthy',
  yielded: 'Yielded to its owner', 'off-hours': 'Out of hours', hot: 'Too hot', asleep: 'Asleep',
};

/**
 * The host's own breaker counts its link dropping; "closed" means all is well, which reads as the opposite, so the
 * badge says what each state means for the link.
 */
const LINK_LABELS = { closed: 'link ok', 'half-open': 'link retrying', open: 'link failing' };

function linkBadge(host) {
  const { breaker } = host;
  const badge = h('span', { class: 'breaker link', 'data-state': breaker.state, title: breaker.lastFailure ? `last drop: ${breaker.lastFailure}` : 'the link to this host' },
    LINK_LABELS[breaker.state] ?? `link ${breaker.state}`);
  if (breaker.state === 'open' && breaker.openUntil) badge.append(' · retry ', clock(breaker.openUntil, { until: true }));
  return badge;
}

/** The tail of a job id: ids share their time prefix (`j_<ms time><random>`), so the random end tells them apart. */
const shortId = (id) => `…${id.slice(-6)}`;

/** A prompt cut to fit a chip. */
const excerpt = (text, length = 28) => (text && text.length > length ? `${text.slice(0, length - 1)}…` : text);

/** One device: its memory in use against the budget the agent keeps, and the models resident on it. */
function deviceRow(device, resident) {
  const share = device.budgetMB > 0 ? device.usedMB / device.budgetMB : 0;
  const level = share >= 0.9 ? 'full' : share >= 0.7 ? 'high' : 'ok';
  const bar = h('div', {
    class: 'bar', role: 'meter', 'data-level': level,
    'aria-label': `${device.id} memory in use`, 'aria-valuemin': 0, 'aria-valuemax': Math.round(device.budgetMB), 'aria-valuenow': Math.round(device.usedMB),
    'aria-valuetext': `${mb(device.usedMB)} of ${mb(device.budgetMB)}`,
  }, h('span', { class: 'fill' }));
  bar.firstChild.style.width = `${Math.min(100, share * 100).toFixed(1)}%`;
  const models = resident.filter((entry) => entry.device === device.id);
  return h('div', { class: 'device', 'data-device': device.id },
    h('div', { class: 'device-head' },
      h('span', { class: 'device-name' }, h('strong', {}, device.id), ` ${device.kind.toUpperCase()} · ${device.name}`),
      h('span', { class: 'memory', title: `${mb(device.memoryTotalMB)} on the device` }, `${mb(device.usedMB)} / ${mb(device.budgetMB)}`)),
    bar,
    // A GPU's temperature and power, as its driver last said (nothing where it says nothing).
    (typeof device.temperatureC === 'number' || typeof device.powerW === 'number') && h('p', { class: 'readings' },
      typeof device.temperatureC === 'number' && h('span', { class: 'heat' }, `${Math.round(device.temperatureC)} °C`),
      typeof device.temperatureC === 'number' && typeof device.powerW === 'number' && ' · ',
      typeof device.powerW === 'number' && h('span', { class: 'power' }, `${Math.round(device.powerW)} W${typeof device.powerLimitW === 'number' ? ` / ${Math.round(device.powerLimitW)} W` : ''}`)),
    models.length > 0 && h('ul', { class: 'resident', 'aria-label': `Resident on ${device.id}` },
      models.map((entry) => h('li', { 'data-model': entry.model }, entry.model, h('small', {}, ` ${mb(entry.memoryMB)}`)))));
}

function replicaRow(replica) {
  return h('tr', { class: 'replica', 'data-model': replica.model, 'data-resident': replica.resident ? 'yes' : 'no' },
    h('th', { scope: 'row' }, replica.model),
    h('td', {}, replica.resident ? h('span', { class: 'dot on', title: 'resident' }, 'yes') : h('span', { class: 'dot', title: 'not resident' }, 'no')),
    h('td', { class: 'health', 'data-health': replica.health, title: replica.healthDetail }, replica.health),
    h('td', { class: 'num' }, replica.throughput == null ? '–' : replica.throughput.toFixed(replica.throughput < 10 ? 1 : 0)),
    h('td', {}, breakerBadge(replica.breaker, replica.model)));
}

/**
 * Jobs in flight (dispatched or running), by id: what the last reload listed, kept current between reloads by the
 * job events themselves, so a job that runs for less than a reload takes still shows on its host.
 */
const flight = new Map();
/** What jobs seen queued are (type, model, prompt), for the chips of jobs dispatched before the next reload. */
const modelOf = new Map();
/**
 * Jobs whose events came while a reload was under way, and what they said: its list of jobs in flight may predate
 * them, so they win over it (a job dispatched, or ended, after the list was read).
 */
let sinceReload = null;

/** The chips of the jobs in flight on `hostId`, by id and model. */
function jobChips(hostId) {
  const jobs = [...flight.values()].filter((job) => job.host === hostId);
  const shown = jobs.slice(0, JOBS_SHOWN_PER_HOST);
  return h('ul', { class: 'jobs', 'aria-label': 'Jobs in flight', hidden: jobs.length === 0 },
    shown.map((job) => h('li', {
      'data-job-id': job.id, 'data-status': job.status,
      title: [`${job.id} (${job.status})`, [job.type, job.model].filter(Boolean).join(' · '), job.prompt].filter(Boolean).join('\n'),
    },
    h('span', { class: 'job-id' }, shortId(job.id)),
    ` ${[job.type, job.model ?? '…'].filter(Boolean).join(' · ')}`,
    job.prompt ? h('span', { class: 'job-prompt' }, ` “${excerpt(job.prompt)}”`) : '')),
    jobs.length > shown.length && h('li', { class: 'more' }, `+${jobs.length - shown.length} more`));
}

function redrawChips(hostId) {
  ui.hosts.querySelector(`.host[data-host="${CSS.escape(hostId)}"] .jobs`)?.replaceWith(jobChips(hostId));
}

/** A job event, applied to the jobs in flight at once (a reload follows, debounced). */
function trackJob(event) {
  if (event.type === 'queued') modelOf.set(event.jobId, { model: event.model, type: event.jobType, prompt: event.prompt ?? null });
  const known = flight.get(event.jobId);
  const what = () => (known ? { model: known.model, type: known.type, prompt: known.prompt } : modelOf.get(event.jobId) ?? {});
  if (event.type === 'dispatched') {
    flight.set(event.jobId, { id: event.jobId, host: event.host, status: 'dispatched', ...what() });
  } else if (event.type === 'running') {
    flight.set(event.jobId, { id: event.jobId, host: event.host, status: 'running', ...what() });
  } else if (['succeeded', 'failed', 'cancelled', 'expired'].includes(event.type)) {
    flight.delete(event.jobId);
    modelOf.delete(event.jobId);
  } else {
    return;
  }
  const now = flight.get(event.jobId);
  sinceReload?.set(event.jobId, now ?? null);
  // A retry may move it to another host: both cards change.
  if (known && known.host !== now?.host) redrawChips(known.host);
  if (now) redrawChips(now.host);
}

/** Each host's energy since the orchestrator started (Wh), from the last status read. */
let energyByHost = {};

function hostCard(host) {
  const state = hostState(host);
  const busy = host.concurrency - host.freeSlots;
  const facts = host.connected
    ? [plural(host.jobsInFlight, 'job'), ' in flight · ', `${busy}/${host.concurrency} slots busy`, host.probesInFlight ? ` · ${plural(host.probesInFlight, 'probe')}` : '',
      typeof energyByHost[host.id] === 'number' ? ` · ${watthours(energyByHost[host.id])} so far` : '']
    : host.left
      ? ['drained and left', ' · ', host.lostAt ? clock(host.lostAt, { prefix: 'left ' }) : 'left']
      : [lostReasons.get(host.id) ?? 'disconnected', ' · ', host.lostAt ? clock(host.lostAt, { prefix: 'lost ' }) : 'lost'];
  // A departed host's link says nothing worth a badge, unless its breaker still counts the drops that lost it.
  const showLink = host.connected || host.breaker.state !== 'closed';
  return h('article', { class: 'host', 'data-host': host.id, 'data-state': state, 'aria-label': `Host ${host.id}` },
    h('header', { class: 'host-head' },
      h('h3', {}, host.id),
      h('span', { class: 'state', 'data-state': state }, HOST_STATE_LABELS[state]),
      showLink && h('span', { class: 'link-breaker' }, linkBadge(host))),
    h('p', { class: 'host-meta' },
      h('span', { class: 'classes' }, host.classes.map((name) => h('span', { class: 'chip' }, name))),
      h('span', { class: 'engines' }, `${host.engines.join(', ')} · v${host.version}`),
      // How the host governs its engine processes (windows · job objects, linux · cgroup v2, macos · portable).
      host.platform && host.governance && h('span', { class: 'platform' }, `${host.platform} · ${host.governance}`)),
    unavailableList(host),
    host.away && h('p', { class: 'away', 'data-state': host.away.state },
      host.away.reason, ' · ', clock(host.away.since, { prefix: 'since ' }), host.wokenAt ? [' · woken ', clock(host.wokenAt)] : ''),
    h('p', { class: 'load', 'data-jobs-in-flight': host.jobsInFlight }, facts),
    h('div', { class: 'devices' }, host.devices.map((device) => deviceRow(device, host.resident))),
    host.replicas.length > 0 && h('table', { class: 'replicas' },
      h('thead', {}, h('tr', {}, ['Model', 'Resident', 'Health', 'Jobs/s', 'Breaker'].map((name) => h('th', { scope: 'col' }, name)))),
      h('tbody', {}, host.replicas.map(replicaRow))),
    jobChips(host.id));
}

/**
 * Job types the host cannot serve, and why (`host.unavailable`, e.g. `{ video: 'ffmpeg not found' }`): said on the
 * card, so a clip that waits is explained where a person looks.
 */
function unavailableList(host) {
  const entries = Object.entries(host.unavailable ?? {});
  if (entries.length === 0) return null;
  return h('ul', { class: 'unavailable', 'aria-label': `Not served by ${host.id}` },
    entries.map(([type, why]) => h('li', { 'data-type': type }, h('strong', {}, `${type}: off`), ` — ${why}`)));
}

function tile(label, value, attributes = {}) {
  return h('div', { class: 'tile', ...attributes }, h('span', { class: 'value' }, value), h('span', { class: 'label' }, label));
}

function renderSummary(hosts, status) {
  const connected = hosts.filter((host) => host.connected);
  // Hosts that drained and left on purpose are not missing: they do not count against the connected ones.
  const expected = hosts.filter((host) => !host.left);
  const breakers = hosts.flatMap((host) => [host.breaker, ...host.replicas.map((replica) => replica.breaker)]);
  const tripped = breakers.filter((breaker) => breaker.state !== 'closed').length;
  const queued = Object.values(status.queues).reduce((sum, queue) => sum + queue.depth, 0);
  const inFlight = connected.reduce((sum, host) => sum + host.jobsInFlight, 0);
  const jobs = status.jobs ?? {};
  ui.summary.replaceChildren(
    tile('hosts connected', `${connected.length} / ${expected.length}`, { 'data-tile': 'hosts' }),
    tile('jobs in flight', number.format(inFlight), { 'data-tile': 'in-flight' }),
    tile('jobs queued', number.format(queued), { 'data-tile': 'queued' }),
    // Jobs that take another job's output, in no queue until it succeeds: counted apart, so a pipeline's later steps
    // are seen as work to come rather than missing from the queues.
    tile('jobs waiting for another job', number.format(jobs.waiting ?? 0), { 'data-tile': 'waiting', title: 'jobs that take another job\'s output, waiting for it to succeed' }),
    tile('breakers not closed', number.format(tripped), { 'data-tile': 'breakers', 'data-alert': tripped > 0 ? 'yes' : 'no' }),
    tile('succeeded', number.format(jobs.succeeded ?? 0), { 'data-tile': 'succeeded' }),
    tile('failed', number.format(jobs.failed ?? 0), { 'data-tile': 'failed', 'data-alert': jobs.failed ? 'yes' : 'no' }),
    ...energyTile(status.energy),
    ...diskTile(status.disk));
}

/** What the GPUs that report their power drew for jobs since the orchestrator started (none: no tile). */
function energyTile(energy) {
  const hosts = Object.values(energy?.byHost ?? {});
  if (hosts.length === 0) return [];
  return [tile('energy since start (GPUs that report power)', watthours(hosts.reduce((sum, value) => sum + value, 0)), { 'data-tile': 'energy' })];
}

/**
 * The data folder's disk (`status.disk`): its free space, and — below the floor, while uploads and jobs are refused —
 * said as such, so a person sees why new work fails before reading an error.
 */
function diskTile(disk) {
  if (!disk || disk.checkedAt === null) return [];
  const free = `${bytes(disk.freeBytes)} free`;
  if (!disk.low) return [tile('disk of the data folder', free, { 'data-tile': 'disk', 'data-alert': 'no' })];
  return [tile(`disk low: new uploads and jobs are refused until it has ${bytes(disk.minFreeBytes)} free`, free, { 'data-tile': 'disk', 'data-alert': 'yes', role: 'alert' })];
}

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
function bytes(count) {
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value >= 100 ? 0 : 1)} ${BYTE_UNITS[unit]}`;
}

/** `changed`: what events said of jobs while the reload ran (null: the job ended), which the listing may predate. */
function renderHosts(hosts, jobs, changed) {
  flight.clear();
  for (const job of jobs) {
    const host = job.attempts.at(-1)?.host;
    if (host) flight.set(job.id, { id: job.id, host, status: job.status, model: job.model, type: job.type, prompt: typeof job.input?.prompt === 'string' ? job.input.prompt : null });
  }
  for (const [id, entry] of changed) {
    if (entry) flight.set(id, entry);
    else flight.delete(id);
  }
  if (modelOf.size > 10_000) modelOf.clear(); // jobs whose end this page never saw
  // Cards are replaced in place, so the page does not jump as the numbers change.
  ui.hosts.replaceChildren(...hosts.map(hostCard));
  ui.noHosts.hidden = hosts.length > 0;
}

function renderQueues(status) {
  const rows = Object.entries(status.queues).sort(([a], [b]) => a.localeCompare(b)).map(([model, queue]) => {
    const replicas = status.models?.[model];
    const ready = replicas?.replicas.filter((replica) => replica.state === 'ready') ?? [];
    const share = queue.limit > 0 ? Math.min(1, queue.depth / queue.limit) : 0;
    const bar = h('div', { class: 'bar small', role: 'meter', 'aria-label': `${model} queue`, 'aria-valuemin': 0, 'aria-valuemax': queue.limit, 'aria-valuenow': queue.depth },
      h('span', { class: 'fill' }));
    bar.firstChild.style.width = `${(share * 100).toFixed(1)}%`;
    return h('tr', { class: 'queue', 'data-model': model, 'data-depth': queue.depth },
      h('th', { scope: 'row' }, model),
      h('td', {}, h('span', { class: 'depth' }, `${number.format(queue.depth)} / ${number.format(queue.limit)}`), bar),
      h('td', { class: 'replica-hosts', title: replicas ? `wants ${replicas.desired} (min ${replicas.min}, max ${replicas.max ?? '∞'})` : null },
        replicas ? `${ready.length} ready / ${replicas.desired} wanted` : '–',
        ready.length > 0 ? h('small', {}, ` (${ready.map((replica) => replica.host).join(', ')})`) : ''),
      h('td', { class: 'blocked' }, [queue.blocked ?? '', typeof status.energy?.byModel?.[model] === 'number' ? h('small', { class: 'energy' }, ` ${watthours(status.energy.byModel[model])} so far`) : '']));
  });
  ui.queues.replaceChildren(...rows);
}

// ---- Plots ----------------------------------------------------------------

const plots = createPlots(ui.plots);
let seriesTimer = null;

/** The series, now and every SERIES_EVERY_MS while the page shows the mesh (not while it sits in a hidden tab). */
async function loadSeries() {
  clearTimeout(seriesTimer);
  if (!grant) return;
  try {
    if (document.visibilityState !== 'hidden') plots.update(await api('/v1/series'));
  } catch (error) {
    failed(error);
  } finally {
    if (grant) seriesTimer = setTimeout(loadSeries, SERIES_EVERY_MS);
  }
}

document.addEventListener('visibilitychange', () => { if (document.visibilityState === 'visible' && grant) loadSeries(); });

// ---- Reloading ------------------------------------------------------------

async function reload() {
  const changed = new Map();
  sinceReload = changed;
  let answers;
  try {
    answers = await Promise.all([api('/v1/hosts'), api('/v1/status'), api('/v1/jobs?status=dispatched,running&limit=200')]);
  } finally {
    if (sinceReload === changed) sinceReload = null;
  }
  const [{ hosts }, status, { jobs }] = answers;
  energyByHost = status.energy?.byHost ?? {};
  renderSummary(hosts, status);
  renderHosts(hosts, jobs, changed);
  renderQueues(status);
  ui.loadError.textContent = '';
  ui.updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
  ui.updated.dataset.at = new Date().toISOString();
}

/** One reload at a time, two at least REFRESH_GAP_MS apart, however many events ask for one (reloader.js). */
const refresher = createReloader({
  reload, onError: (error) => failed(error), delayMs: REFRESH_DELAY_MS, gapMs: REFRESH_GAP_MS, everyMs: SLOW_REFRESH_MS,
});

function failed(error) {
  if (error instanceof GrantChanged) return; // the answer was for the grant this page had before
  // 401: the grant itself is no good (invalid, expired, revoked); 403: it cannot read the mesh (a gallery grant).
  if (error.status === 401) return askForGrant(error.message);
  if (error.status === 403) return askForGrant(`This grant cannot read the mesh (${error.message}). Use the mesh link from \`gpumesh up\` or \`gpumesh grant mesh\`.`);
  ui.loadError.textContent = `Could not load the mesh: ${error.message}`;
}

// ---- Live events ----------------------------------------------------------

const where = (event) => (event.model ? `${event.host}/${event.model}` : `${event.host} (link)`);

/** Mesh events in words, for the activity list. */
const DESCRIBE = {
  'host:joined': (e) => `${e.host} joined (${e.classes.join(', ') || 'no classes'})`,
  'host:lost': (e) => `${e.host} lost: ${e.reason}`,
  'host:draining': (e) => `${e.host} draining, ${plural(e.jobsInFlight, 'job')} in flight`,
  'host:left': (e) => `${e.host} drained and left`,
  'host:away': (e) => `${e.host} takes no work: ${e.reason}`,
  'host:back': (e) => `${e.host} takes work again`,
  'replica:loaded': (e) => `${e.host} loaded ${e.model} on ${e.device} (${mb(e.memoryMB)})`,
  'replica:unloaded': (e) => `${e.host} unloaded ${e.model} from ${e.device}`,
  'replica:refused': (e) => `${e.host} would not load ${e.model}: ${e.message}`,
  'link:refused': (e) => `${e.host}: ${e.count ?? 1} report${(e.count ?? 1) === 1 ? '' : 's'} refused (${e.what})`,
  'blob:corrupt': (e) => `blob ${e.digest.slice(0, 19)}… failed its ${e.check} check`,
  'breaker:opened': (e) => `breaker of ${where(e)} opened for ${span(e.openForMs)}: ${e.reason}`,
  'breaker:half-open': (e) => `breaker of ${where(e)} half-open: letting a trial through`,
  'breaker:closed': (e) => `breaker of ${where(e)} closed`,
};

const SERIOUS = new Set(['host:lost', 'breaker:opened', 'replica:refused', 'link:refused', 'blob:corrupt']);

function logActivity(event) {
  const item = h('li', { 'data-type': event.type, 'data-host': event.host ?? null, 'data-serious': SERIOUS.has(event.type) ? 'yes' : null },
    h('time', { datetime: event.at, title: new Date(event.at).toLocaleString() }, new Date(event.at).toLocaleTimeString()),
    h('span', {}, DESCRIBE[event.type](event)));
  ui.activity.prepend(item);
  while (ui.activity.children.length > ACTIVITY_ITEMS) ui.activity.lastElementChild.remove();
  ui.noActivity.hidden = true;
}

const CONNECTION_LABELS = { idle: '', connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…', offline: 'Offline' };

function showConnection(state) {
  ui.connection.dataset.state = state;
  ui.connection.textContent = CONNECTION_LABELS[state];
}

/**
 * Follow the mesh. EventSource reconnects by itself (the server replays what was missed, or sends `resync`);
 * either way the page reloads, since a reload is cheap and the view holds nothing but the latest state.
 */
function connect() {
  const types = [...JOB_EVENTS, ...MESH_EVENTS].join(',');
  const source = new EventSource(`/v1/events?types=${types}&access_token=${encodeURIComponent(grant)}`);
  events = source;
  showConnection('connecting');
  source.addEventListener('open', () => {
    showConnection('live');
    retryMs = 5_000;
    refresher.request();
  });
  source.addEventListener('resync', () => refresher.request());
  source.addEventListener('grant:ended', (message) => askForGrant(JSON.parse(message.data).error?.message ?? 'The grant ended.'));
  source.addEventListener('error', () => {
    if (source.readyState !== EventSource.CLOSED) return showConnection('reconnecting');
    // Refused outright (a server going down, a grant refused): EventSource gives up, so try again later;
    // a reload first tells a grant that is no good (which asks for another) from a server that is away.
    showConnection('offline');
    setTimeout(() => {
      if (events === source) reload().then(() => events === source && connect(), (error) => { failed(error); if (events === source) connect(); });
    }, retryMs);
    retryMs = Math.min(retryMs * 2, 60_000);
  });
  for (const type of JOB_EVENTS) {
    source.addEventListener(type, (message) => {
      trackJob(JSON.parse(message.data));
      refresher.request();
    });
  }
  for (const type of MESH_EVENTS) {
    source.addEventListener(type, (message) => {
      const event = JSON.parse(message.data);
      if (event.type === 'host:lost') lostReasons.set(event.host, event.reason);
      if (event.type === 'host:joined') lostReasons.delete(event.host);
      logActivity(event);
      // What the mesh looks like changed: show it promptly.
      refresher.request(0);
      if (event.type === 'replica:loaded' || event.type === 'replica:unloaded') setTimeout(() => refresher.request(0), AFTER_HEARTBEAT_MS);
    });
  }
}

// ---- Start ----------------------------------------------------------------

function start(value) {
  events?.close();
  grant = value;
  ui.grantPanel.hidden = true;
  ui.app.hidden = false;
  ui.forget.hidden = false;
  ui.activity.replaceChildren();
  ui.noActivity.hidden = false;
  refresher.start();
  refresher.request(0);
  connect();
  loadSeries();
}

// Countdowns and "ago"s move on their own between reloads.
setInterval(() => {
  for (const time of document.querySelectorAll('time[data-relative]')) tickOne(time);
}, 1_000);

wireGrant({ key: GRANT_KEY, forget: ui.forget, form: ui.grantForm, start, ask: askForGrant, current: () => grant });
