// The gallery's detail view of one result: the picture or clip at full size, its prompt, every parameter the job
// ran with (the seed the pipeline filled in included, so it can be made again exactly), the model, where it ran
// (each attempt with its route), how long each part took, and a download. It is a <dialog>: modal, Esc closes it,
// focus stays inside while it is open and returns to the card that opened it. No state of its own beyond the job
// shown; what the buttons do is the gallery's (`actions`).

import { h } from './dom.js';
import { watthours } from './units.js';

const seconds = (ms) => (ms == null ? null : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`);
const between = (from, to) => (from && to ? Date.parse(to) - Date.parse(from) : null);

/** The input's parameters in a stable order: the ones people tune first, then the rest as the job has them. */
const FIRST = ['seed', 'width', 'height', 'steps', 'frames', 'fps', 'strength'];

function parameterRows(input) {
  const keys = [...FIRST.filter((key) => key in input), ...Object.keys(input).filter((key) => key !== 'prompt' && !FIRST.includes(key)).sort()];
  return keys.map((key) => {
    const value = input[key];
    return [key, typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value)];
  });
}

/** A definition list from `[term, value]` pairs; values may be nodes. Empty values are left out. */
function facts(pairs, attributes = {}) {
  return h('dl', { class: 'facts', ...attributes }, pairs.filter(([, value]) => value != null && value !== '').flatMap(([term, value]) => [
    h('dt', {}, term), h('dd', { 'data-fact': term }, value),
  ]));
}

/** One attempt in words: where it ran, how it ended, the route that chose the host (class, warmth, hosts passed over). */
function attemptItem(attempt) {
  const route = attempt.route;
  const skipped = route?.skipped?.length ? ` · passed over ${route.skipped.map((entry) => `${entry.host} (${entry.reason})`).join(', ')}` : '';
  const how = route ? ` · ${[route.class && `class ${route.class}`, route.warmth].filter(Boolean).join(', ')}` : '';
  const batch = attempt.batchSize > 1 ? ` · batch of ${attempt.batchSize}` : '';
  return h('li', { 'data-attempt': attempt.n, 'data-status': attempt.status },
    h('strong', {}, `#${attempt.n} ${attempt.host}`), ` ${attempt.status}${how}${batch}${skipped}`,
    attempt.error ? h('span', { class: 'error' }, ` — ${attempt.error.code}: ${attempt.error.message}`) : '');
}

/** Where the time went: waiting for a host, loading the model, computing, and the whole. */
function timingRows(job, artifact) {
  const last = job.attempts.at(-1);
  const result = job.result && typeof job.result === 'object' ? job.result : {};
  return [
    ['waited', seconds(between(job.createdAt, last?.dispatchedAt))],
    ['model load', last?.loadMs ? seconds(last.loadMs) : null],
    ['compute', seconds(artifact?.computeMs ?? last?.computeMs)],
    ['rendering', seconds(result.generateMs)],
    ['encoding', seconds(result.encodeMs)],
    ['total', seconds(artifact?.totalMs ?? between(job.createdAt, job.finishedAt))],
    // Its share of its batch's energy, where the GPU reported its power (none on a CPU: no row).
    ['energy', typeof artifact?.energyWh === 'number' ? watthours(artifact.energyWh) : null],
  ];
}

/**
 * The detail dialog. `show(job, artifact)` fills it; `actions` are the gallery's: `url(path)` (a blob URL with the
 * link grant), `again(job)`, `variations(job)`, `animate(job)` (a clip from the picture), `reuse(job)`, `remove(job)`,
 * `go(step)` (the next or previous card), `mayDelete()`, `maySubmit()`.
 */
export function createDetail(dialog, actions) {
  const part = (selector) => dialog.querySelector(selector);
  const media = part('#detail-media');
  const info = part('#detail-info');
  const status = part('#detail-status');
  const download = part('#download');
  const remove = part('#delete');
  let current = null;
  let opener = null;
  let confirmTimer = null;

  const say = (text) => { status.textContent = text; };

  async function run(button, work) {
    button.disabled = true;
    try {
      await work();
    } catch (error) {
      say(error.message);
    } finally {
      button.disabled = false;
    }
  }

  part('#again').addEventListener('click', (event) => run(event.currentTarget, async () => {
    await actions.again(current.job);
    say('Queued again with a new seed: it appears first in the grid.');
  }));
  part('#variations').addEventListener('click', (event) => run(event.currentTarget, async () => {
    const count = await actions.variations(current.job);
    say(`${count} variations queued (the same parameters, new seeds).`);
  }));
  // A clip that starts from this picture: a job that takes the picture by reference (`fromJob`), made wherever clips are.
  const animate = part('#animate');
  animate.addEventListener('click', (event) => run(event.currentTarget, async () => {
    await actions.animate(current.job);
    say('A clip from this picture is queued: it appears first in the grid.');
  }));
  part('#reuse').addEventListener('click', () => {
    actions.reuse(current.job);
    dialog.close();
  });
  // Deleting asks twice: the first press arms the button for a few seconds.
  remove.addEventListener('click', (event) => {
    if (remove.dataset.armed !== 'yes') {
      remove.dataset.armed = 'yes';
      remove.textContent = 'Delete for good?';
      clearTimeout(confirmTimer);
      confirmTimer = setTimeout(disarm, 4000);
      return;
    }
    disarm();
    run(event.currentTarget, async () => {
      await actions.remove(current.job);
      dialog.close();
    });
  });
  function disarm() {
    clearTimeout(confirmTimer);
    remove.dataset.armed = 'no';
    remove.textContent = 'Delete';
  }

  for (const button of dialog.querySelectorAll('[data-go]')) button.addEventListener('click', () => actions.go(Number(button.dataset.go)));
  part('[data-close]').addEventListener('click', () => dialog.close());
  // A click on the backdrop (outside the body) closes it, as a person expects of a lightbox.
  dialog.addEventListener('click', (event) => { if (event.target === dialog) dialog.close(); });
  dialog.addEventListener('keydown', (event) => {
    if (event.target instanceof HTMLInputElement || event.altKey || event.ctrlKey || event.metaKey) return;
    if (event.key === 'ArrowLeft') { event.preventDefault(); actions.go(-1); }
    if (event.key === 'ArrowRight') { event.preventDefault(); actions.go(1); }
  });
  dialog.addEventListener('close', () => {
    media.replaceChildren(); // stops a clip playing
    disarm();
    current = null;
    if (opener?.isConnected) opener.focus();
    opener = null;
  });

  function render(job, artifact) {
    const poster = job.artifacts.find((other) => other.mediaType.startsWith('image/') && job.type === 'video');
    const main = job.type === 'video' ? job.artifacts.find((other) => other.mediaType.startsWith('video/')) ?? artifact : artifact;
    const prompt = typeof job.input.prompt === 'string' ? job.input.prompt : null;
    part('#detail-title').textContent = job.type === 'video' ? 'Clip' : 'Image';
    if (main.mediaType.startsWith('video/')) {
      const video = h('video', { src: actions.url(main.url), poster: poster ? actions.url(poster.url) : null, controls: true, loop: true, playsinline: true, preload: 'metadata', 'aria-label': prompt ? `A clip of ${prompt}` : 'A clip' });
      video.muted = true;
      media.replaceChildren(video);
    } else if (main.mediaType.startsWith('image/')) {
      media.replaceChildren(h('img', { src: actions.url(main.url), alt: prompt ?? `An image by ${job.model}`, width: main.width, height: main.height }));
    } else {
      media.replaceChildren(h('p', { class: 'note' }, `${main.mediaType}: download it below.`));
    }
    const extension = main.mediaType.split('/')[1]?.replace('jpeg', 'jpg') ?? 'bin';
    download.href = actions.url(main.url);
    download.setAttribute('download', `${job.id}.${extension}`);
    download.textContent = `Download (${main.mediaType}, ${new Intl.NumberFormat().format(main.bytes)} bytes)`;
    remove.hidden = !actions.mayDelete();
    animate.hidden = job.type !== 'image' || !actions.maySubmit();
    const last = job.attempts.at(-1);
    info.replaceChildren(
      h('p', { class: 'detail-prompt' }, prompt ?? 'No prompt'),
      h('h3', {}, 'Parameters'),
      facts(parameterRows(job.input), { 'aria-label': 'Parameters' }),
      h('h3', {}, 'Made by'),
      facts([
        ['model', job.model], ['type', job.type], ['host', last?.host ?? main.host], ['album', job.album], ['priority', String(job.priority)],
        ['batch', job.batch ? `${job.batch.size} job${job.batch.size === 1 ? '' : 's'}` : null],
        ['created', h('time', { datetime: job.createdAt }, new Date(job.createdAt).toLocaleString())],
        ['job', h('code', {}, job.id)], ['digest', h('code', { title: main.digest }, `${main.digest.slice(0, 19)}…`)],
      ], { 'aria-label': 'Made by' }),
      h('h3', {}, 'Timings'),
      facts(timingRows(job, main), { 'aria-label': 'Timings' }),
      h('h3', {}, job.attempts.length === 1 ? 'Attempt' : `Attempts (${job.attempts.length})`),
      h('ol', { class: 'attempts' }, job.attempts.map(attemptItem)));
  }

  return {
    /** Open (or move) the dialog onto `job`, whose result `artifact` was clicked. */
    show(job, artifact, from) {
      current = { job, artifact };
      if (from) opener = opener ?? from;
      say('');
      disarm();
      render(job, artifact);
      if (!dialog.open) dialog.showModal();
    },
    get job() {
      return current?.job ?? null;
    },
    close() {
      if (dialog.open) dialog.close();
    },
  };
}
