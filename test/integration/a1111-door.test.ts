import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blobDirEntries } from '../helpers/blob-dir.js';
import { removeDir, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { comparedHalves } from '../helpers/pixels.js';
import { sdcppStandinSettings } from '../helpers/standins.js';

/**
 * The AUTOMATIC1111-compatible door (`/sdapi/v1`) on a real `gpumesh up`, driven the way its clients drive an A1111:
 * SillyTavern's `/api/sd` routes (src/endpoints/stable-diffusion.js: options, the lists, a model switch, txt2img with
 * its whole request body, interrupt) and Open WebUI's (backend/open_webui/routers/images.py: options before every
 * generation, txt2img with its fields and the admin's JSON merged on top, a model switch by posting the whole options
 * object back), each with HTTP Basic `user:<grant>` as those clients send it. Two image models: the built-in `gen` and
 * `sd15`, an sd.cpp server (the project's stand-in) the agent starts — so the door serves whatever engine makes pictures.
 */
let mesh: RunningMesh;
const data = tempDir();

const basic = (user: string, password: string): string => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

interface Answer {
  status: number;
  headers: Headers;
  json: any;
}

/** A request as the clients send them: JSON, with their Authorization header (or none). */
async function sd(method: string, path: string, options: { body?: unknown; auth?: string | null; raw?: string } = {}): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (options.auth) headers.authorization = options.auth;
  const body = options.raw ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${mesh.url}${path}`, { method, headers, body });
  const text = await response.text();
  return { status: response.status, headers: response.headers, json: text === '' ? undefined : JSON.parse(text) };
}

async function mint(body: Record<string, unknown>): Promise<string> {
  const response = await fetch(`${mesh.url}/v1/grants`, {
    method: 'POST', headers: { authorization: `Bearer ${mesh.admin}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  expect(response.status).toBe(201);
  return ((await response.json()) as { token: string }).token;
}

/** A grant as the door's guide tells an owner to mint it: a client grant for image jobs. */
const imageGrant = (): Promise<string> => mint({ kind: 'client', types: ['image'] });

const pictureOf = async (b64: string) => sharp(Buffer.from(b64, 'base64')).metadata();

beforeAll(async () => {
  writeFileSync(join(data, 'sd15.gguf'), 'stand-in weights');
  mesh = await startMesh({
    data,
    config: {
      models: {
        sd15: {
          engine: 'sdcpp', types: ['image'], memoryMB: 64, file: 'sd15.gguf', params: { defaultSteps: 4 },
          settings: sdcppStandinSettings('--step-ms 5'),
        },
      },
    },
  });
}, 120_000);

afterAll(async () => {
  await mesh?.stop();
  removeDir(data);
});

describe("SillyTavern's flow (src/endpoints/stable-diffusion.js, the A1111 source)", () => {
  it('connects (options, then its lists), switches the model through the options, generates with its request body, and interrupts', async () => {
    const auth = basic('sillytavern', await imageGrant());
    // /ping and /get-model: GET options; a failure fails the connect. SillyTavern takes `forge_preset` as Forge.
    const options = await sd('GET', '/sdapi/v1/options', { auth });
    expect(options.status).toBe(200);
    expect(options.json.sd_model_checkpoint).toMatch(/^gen \[[0-9a-f]{10}\]$/);
    expect(options.json).not.toHaveProperty('forge_preset');

    // The lists it fills its menus from, read as it reads them.
    const names = async (path: string, key = 'name'): Promise<string[]> => {
      const answer = await sd('GET', `/sdapi/v1/${path}`, { auth });
      expect(answer.status, path).toBe(200);
      return (answer.json as Record<string, string>[]).map((entry) => entry[key]!);
    };
    expect(await names('samplers')).toEqual(expect.arrayContaining(['Euler a', 'DPM++ 2M', 'DDIM']));
    expect(await names('schedulers')).toEqual(expect.arrayContaining(['automatic', 'karras']));
    const titles = await names('sd-models', 'title');
    expect(titles).toHaveLength(2);
    expect(titles[0]).toBe(options.json.sd_model_checkpoint);
    const sd15 = titles.find((title) => title.startsWith('sd15 ['))!;
    expect(sd15).toMatch(/^sd15 \[[0-9a-f]{10}\]$/);
    expect(await names('sd-vae', 'model_name')).toEqual([]);
    expect((await names('upscalers'))[0]).toBe('None');
    expect(await names('latent-upscale-modes')).toEqual([]);

    // /set-model: POST options {sd_model_checkpoint}, then /progress until it is idle (progress 0, job_count 0).
    expect((await sd('POST', '/sdapi/v1/options', { auth, body: { sd_model_checkpoint: sd15 } })).status).toBe(200);
    const idle = await sd('GET', '/sdapi/v1/progress', { auth });
    expect(idle.json).toMatchObject({ progress: 0, state: { job_count: 0 } });
    expect((await sd('GET', '/sdapi/v1/options', { auth })).json.sd_model_checkpoint).toBe(sd15);

    // /generate: options first, then txt2img with SillyTavern's whole body (its own url and auth among the fields).
    expect((await sd('GET', '/sdapi/v1/options', { auth })).status).toBe(200);
    const body = {
      url: mesh.url, auth: 'sillytavern:secret',
      prompt: 'a tavern at night, lanterns', negative_prompt: 'blurry', sampler_name: 'DPM++ 2M', scheduler: 'karras', steps: 20, cfg_scale: 7,
      width: 96, height: 64, restore_faces: false, enable_hr: false, hr_upscaler: 'Latent', hr_scale: 2, denoising_strength: 0.7, hr_second_pass_steps: 0,
      override_settings: { CLIP_stop_at_last_layers: 1 }, override_settings_restore_afterwards: true, clip_skip: 1,
      save_images: true, send_images: true, do_not_save_grid: false, do_not_save_samples: false,
    };
    const generated = await sd('POST', '/sdapi/v1/txt2img', { auth, body });
    expect(generated.status, JSON.stringify(generated.json)).toBe(200);
    // It reads images[0] only.
    expect(await pictureOf(generated.json.images[0])).toMatchObject({ format: 'png', width: 96, height: 64 });
    const info = JSON.parse(generated.json.info);
    expect(info).toMatchObject({ prompt: body.prompt, negative_prompt: 'blurry', sd_model_name: 'sd15', sampler_name: 'DPM++ 2M', steps: 20, width: 96, height: 64 });
    expect(info.seed).toEqual(expect.any(Number));
    expect(info.all_seeds).toEqual([info.seed]);
    expect(info.job_ids).toHaveLength(1);
    // Its own fields are not echoed (the auth it carries in the body least of all); A1111's are, as read.
    expect(generated.json.parameters).not.toHaveProperty('auth');
    expect(generated.json.parameters).not.toHaveProperty('url');
    expect(generated.json.parameters).toMatchObject({ prompt: body.prompt, steps: 20, seed: -1, batch_size: 1, n_iter: 1 });

    // A connection it closes is followed by /interrupt: nothing of its is running, so nothing to do.
    const interrupted = await sd('POST', '/sdapi/v1/interrupt', { auth });
    expect(interrupted).toMatchObject({ status: 200, json: {} });
  });

  it("one caller's model switch is its lineage's own: another grant still gets the default", async () => {
    const mine = basic('', await imageGrant());
    const other = basic('someone', await imageGrant());
    const sd15 = ((await sd('GET', '/sdapi/v1/sd-models', { auth: mine })).json as { title: string }[]).find((model) => model.title.startsWith('sd15'))!.title;
    // A grant alone in the user field (the password empty) is taken too.
    expect((await sd('POST', '/sdapi/v1/options', { auth: mine, body: { sd_model_checkpoint: 'sd15' } })).status).toBe(200);
    expect((await sd('GET', '/sdapi/v1/options', { auth: mine })).json.sd_model_checkpoint).toBe(sd15);
    expect((await sd('GET', '/sdapi/v1/options', { auth: other })).json.sd_model_checkpoint).toMatch(/^gen \[/);
  });
});

describe("Open WebUI's flow (backend/open_webui/routers/images.py)", () => {
  it('switches the model by posting the whole options object back, reads options before each generation, and gets images and info with its seed', async () => {
    const auth = basic('openwebui', await imageGrant());
    const sd15 = ((await sd('GET', '/sdapi/v1/sd-models', { auth })).json as { title: string; model_name: string }[]).find((model) => model.model_name === 'sd15')!;
    // set_image_model: GET options; if the model differs, the same object with sd_model_checkpoint changed, posted back.
    const options = (await sd('GET', '/sdapi/v1/options', { auth })).json as Record<string, unknown>;
    options.sd_model_checkpoint = sd15.title;
    const posted = await sd('POST', '/sdapi/v1/options', { auth, body: options });
    expect(posted.status).toBe(200);
    expect(posted.json).toBeNull();

    // image_generations: get_image_model reads options; then txt2img with {prompt, batch_size, width, height, steps}
    // (IMAGE_STEPS, 50 by default) and the admin's AUTOMATIC1111_PARAMS merged on top — the only way to fix a seed.
    expect((await sd('GET', '/sdapi/v1/options', { auth })).json.sd_model_checkpoint).toBe(sd15.title);
    const answer = await sd('POST', '/sdapi/v1/txt2img', { auth, body: { prompt: 'a lighthouse', batch_size: 2, width: 64, height: 64, steps: 50, ...{ seed: 1234, cfg_scale: 5 } } });
    expect(answer.status, JSON.stringify(answer.json)).toBe(200);
    expect(answer.json.images).toHaveLength(2);
    for (const image of answer.json.images as string[]) expect(await pictureOf(image)).toMatchObject({ format: 'png', width: 64, height: 64 });
    expect(answer.json.images[0]).not.toBe(answer.json.images[1]);
    const info = JSON.parse(answer.json.info);
    // 50 steps are more than the mesh runs (32): run at 32, and said so, rather than refused.
    expect(info).toMatchObject({ seed: 1234, all_seeds: [1234, 1235], steps: 32, sd_model_name: 'sd15', extra_generation_params: { 'Steps asked': expect.stringContaining('50') } });
    expect(info.infotexts[1]).toContain('Seed: 1235');

    // Back to the built-in model the same way.
    const again = (await sd('GET', '/sdapi/v1/options', { auth })).json as Record<string, unknown>;
    const gen = ((await sd('GET', '/sdapi/v1/sd-models', { auth })).json as { title: string; model_name: string }[]).find((model) => model.model_name === 'gen')!;
    expect((await sd('POST', '/sdapi/v1/options', { auth, body: { ...again, sd_model_checkpoint: gen.title } })).status).toBe(200);
    const onGen = await sd('POST', '/sdapi/v1/txt2img', { auth, body: { prompt: 'a lighthouse', batch_size: 1, width: 64, height: 64, steps: 8, seed: 1234 } });
    expect(JSON.parse(onGen.json.info)).toMatchObject({ sd_model_name: 'gen', seed: 1234, steps: 8 });
  });
});

describe('/sdapi/v1/progress and /interrupt', () => {
  it('moves while a slow job runs (0 < progress < 1, its step, a preview as current_image), for its caller only, and is idle after', async () => {
    const auth = basic('user', await imageGrant());
    const other = basic('user', await imageGrant());
    const slow = sd('POST', '/sdapi/v1/txt2img', { auth, body: { prompt: 'a slow storm', width: 256, height: 256, steps: 32, seed: 7 } });
    let done = false;
    void slow.finally(() => (done = true));
    const seen: { progress: number; step: number; steps: number; count: number; image: string | null }[] = [];
    let others = 0;
    while (!done) {
      const [mine, theirs] = await Promise.all([sd('GET', '/sdapi/v1/progress', { auth }), sd('GET', '/sdapi/v1/progress', { auth: other })]);
      const { progress, state, current_image: image } = mine.json;
      seen.push({ progress, step: state.sampling_step, steps: state.sampling_steps, count: state.job_count, image });
      others = Math.max(others, theirs.json.state.job_count);
      await new Promise((resolve) => setTimeout(resolve, 40));
    }
    expect((await slow).status).toBe(200);
    const moving = seen.filter((sample) => sample.progress > 0 && sample.progress < 1);
    expect(moving.length, JSON.stringify(seen.map(({ image, ...rest }) => ({ ...rest, image: image !== null })))).toBeGreaterThan(1);
    expect(moving.every((sample) => sample.count === 1 && sample.steps === 32 && sample.step > 0)).toBe(true);
    // Progress only goes forward.
    const values = seen.map((sample) => sample.progress).filter((value) => value > 0);
    expect(values).toEqual([...values].sort((a, b) => a - b));
    const preview = seen.find((sample) => sample.image !== null)?.image;
    expect(preview).toBeDefined();
    expect(await pictureOf(preview!)).toMatchObject({ format: 'png', width: 256, height: 256 });
    expect(others).toBe(0);
    expect((await sd('GET', '/sdapi/v1/progress', { auth })).json).toMatchObject({ progress: 0, eta_relative: 0, current_image: null, state: { job_count: 0 } });
  });

  it('interrupt cancels the caller\'s pictures being made: its request answers 200 with what was made, and the jobs end cancelled', async () => {
    const auth = basic('user', await imageGrant());
    const slow = sd('POST', '/sdapi/v1/txt2img', { auth, body: { prompt: 'never finished', width: 1024, height: 1024, steps: 32, batch_size: 2 } });
    await waitFor(async () => (await sd('GET', '/sdapi/v1/progress', { auth })).json.state.sampling_step > 0, { what: 'the pictures to be made' });
    expect((await sd('POST', '/sdapi/v1/interrupt', { auth })).json).toEqual({});
    const answer = await slow;
    expect(answer.status).toBe(200);
    expect(answer.json.images).toEqual([]);
    const info = JSON.parse(answer.json.info);
    expect(info.all_seeds).toHaveLength(2);
    const jobs = await Promise.all((info.job_ids as string[]).map(async (id) => (await mesh.client().job(id)) as { status: string }));
    expect(jobs.map((job) => job.status)).toEqual(['cancelled', 'cancelled']);
  });
});

describe('img2img', () => {
  it('starts from init_images[0] (a data: URL) and keeps what the mask leaves black, as A1111 masks (white repaints)', async () => {
    const auth = basic('user', await imageGrant());
    const svg = '<svg xmlns="http://www.w3.org/2000/svg" width="96" height="64"><rect width="96" height="64" fill="#3060c0"/><circle cx="48" cy="32" r="18" fill="#e0d0a0"/></svg>';
    const png = await sharp(Buffer.from(svg)).png().toBuffer();
    // White on the left half: repaint it; the right half stays.
    const mask = await sharp(Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="96" height="64"><rect width="96" height="64" fill="#000"/><rect width="48" height="64" fill="#fff"/></svg>')).png().toBuffer();
    const answer = await sd('POST', '/sdapi/v1/img2img', {
      auth, body: { init_images: [`data:image/png;base64,${png.toString('base64')}`], mask: mask.toString('base64'), denoising_strength: 1, prompt: 'the same scene at night', seed: 3 },
    });
    expect(answer.status, JSON.stringify(answer.json)).toBe(200);
    const made = Buffer.from(answer.json.images[0], 'base64');
    expect(await sharp(made).metadata()).toMatchObject({ width: 96, height: 64 });
    const { left, right } = await comparedHalves(png, made, 48);
    expect(right.same).toBe(48 * 64);
    expect(left.changed).toBeGreaterThan(48 * 64 * 0.5);
    expect(JSON.parse(answer.json.info)).toMatchObject({ denoising_strength: 1, width: 96, height: 64 });
    // As A1111 answers: the pictures sent are not echoed back.
    expect(answer.json.parameters).toMatchObject({ init_images: null, mask: null, denoising_strength: 1 });
  });

  it('refuses a picture that is not one (IMAGE_REFUSED naming it), a URL, and more than one to start from', async () => {
    const auth = basic('user', await imageGrant());
    const notPicture = await sd('POST', '/sdapi/v1/img2img', { auth, body: { init_images: [Buffer.from('%PDF-1.4 not a picture').toString('base64')], prompt: 'x' } });
    expect(notPicture.status).toBe(400);
    expect(notPicture.json).toMatchObject({ error: 'IMAGE_REFUSED', detail: expect.stringContaining('init_images[0]') });
    const url = await sd('POST', '/sdapi/v1/img2img', { auth, body: { init_images: ['http://169.254.169.254/latest'], prompt: 'x' } });
    expect(url.json).toMatchObject({ error: 'IMAGE_REFUSED', detail: expect.stringContaining('fetches no URLs') });
    const two = await sd('POST', '/sdapi/v1/img2img', { auth, body: { init_images: ['aGk=', 'aGk='], prompt: 'x' } });
    expect(two.status).toBe(422);
    expect(two.json.detail[0]).toMatchObject({ loc: ['body', 'init_images'], msg: expect.stringContaining('starts from one') });

    // Refused for its rate after its pictures were judged: nothing of them is stored.
    const onePerMinute = basic('user', await mint({ kind: 'client', types: ['image'], rate: '1/m' }));
    const before = blobDirEntries(mesh.data);
    const picture = await sharp({ create: { width: 24, height: 24, channels: 3, background: '#123456' } }).png().toBuffer();
    const mask = await sharp({ create: { width: 24, height: 24, channels: 3, background: '#ffffff' } }).png().toBuffer();
    const limited = await sd('POST', '/sdapi/v1/img2img', { auth: onePerMinute, body: { init_images: [picture.toString('base64')], mask: mask.toString('base64'), prompt: 'x', batch_size: 2 } });
    expect(limited.status).toBe(429);
    expect(limited.json.error).toBe('RATE_LIMITED');
    expect(blobDirEntries(mesh.data)).toEqual(before);
  });
});

describe('credentials and client mistakes', () => {
  it('401 with a Basic challenge without credentials (none, an empty Basic), 403 for a grant that may not make images, Bearer works too', async () => {
    for (const auth of [null, 'Basic ', basic('', '')]) {
      const refused = await sd('GET', '/sdapi/v1/options', { auth });
      expect(refused.status, String(auth)).toBe(401);
      expect(refused.headers.get('www-authenticate')).toMatch(/^Basic realm="gpumesh"/);
      expect(refused.json).toMatchObject({ error: 'GRANT_MISSING', detail: expect.any(String), body: '', errors: expect.stringMatching(/^401: /) });
    }
    expect((await sd('POST', '/sdapi/v1/txt2img', { auth: basic('user', 'not-a-grant'), body: { prompt: 'x' } })).status).toBe(401);
    const videoOnly = basic('user', await mint({ kind: 'client', types: ['video'] }));
    for (const [method, path] of [['GET', '/sdapi/v1/options'], ['POST', '/sdapi/v1/txt2img'], ['GET', '/sdapi/v1/progress'], ['POST', '/sdapi/v1/interrupt']] as const) {
      const denied = await sd(method, path, { auth: videoOnly, ...(method === 'POST' ? { body: { prompt: 'x' } } : {}) });
      expect(denied.status, path).toBe(403);
      expect(denied.json.error).toBe('GRANT_DENIED');
    }
    expect((await sd('GET', '/sdapi/v1/sd-models', { auth: `Bearer ${await imageGrant()}` })).status).toBe(200);
  });

  it('a body of the wrong types is 422 in FastAPI\'s shape; every client mistake is a 4xx in A1111\'s', async () => {
    const auth = basic('user', await imageGrant());
    const wrong = await sd('POST', '/sdapi/v1/txt2img', { auth, body: { prompt: 'x', steps: 'many', width: '64', seed: 1.5, send_images: 'maybe' } });
    expect(wrong.status).toBe(422);
    expect(wrong.json.detail).toEqual([
      { loc: ['body', 'seed'], msg: 'value is not a valid integer', type: 'type_error.integer' },
      { loc: ['body', 'steps'], msg: 'value is not a valid integer', type: 'type_error.integer' },
      { loc: ['body', 'send_images'], msg: 'value could not be parsed to a boolean', type: 'type_error.bool' },
    ]);
    const cases: [string, string, { body?: unknown; raw?: string }, number, string | null][] = [
      ['too wide', '/sdapi/v1/txt2img', { body: { prompt: 'x', width: 4096 } }, 422, null],
      ['too many pictures', '/sdapi/v1/txt2img', { body: { prompt: 'x', batch_size: 5, n_iter: 3 } }, 422, null],
      ['no prompt', '/sdapi/v1/txt2img', { body: { width: 64 } }, 422, null],
      ['not an object', '/sdapi/v1/txt2img', { body: ['x'] }, 422, null],
      ['not JSON', '/sdapi/v1/txt2img', { raw: '{"prompt":' }, 422, null],
      ['an unknown model', '/sdapi/v1/txt2img', { body: { prompt: 'x', override_settings: { sd_model_checkpoint: 'sdxl-turbo' } } }, 400, 'UNKNOWN_MODEL'],
      ['options not an object', '/sdapi/v1/options', { body: [1] }, 422, null],
      ['options naming an unknown model', '/sdapi/v1/options', { body: { sd_model_checkpoint: 'nope [0000000000]' } }, 400, 'UNKNOWN_MODEL'],
      ['img2img without a picture', '/sdapi/v1/img2img', { body: { prompt: 'x' } }, 422, null],
      ['a route A1111 has and the mesh not', '/sdapi/v1/extra-single-image', { body: {} }, 404, 'ROUTE_NOT_FOUND'],
      ['a body over the limit', '/sdapi/v1/txt2img', { body: { prompt: 'x'.repeat(2 * 1024 * 1024) } }, 413, 'PAYLOAD_TOO_LARGE'],
    ];
    for (const [what, path, request, status, code] of cases) {
      const answer = await sd('POST', path, { auth, ...request });
      expect(answer.status, what).toBe(status);
      if (code) expect(answer.json, what).toMatchObject({ error: code, detail: expect.any(String) });
      else expect(answer.json.detail[0], what).toMatchObject({ loc: expect.arrayContaining(['body']), msg: expect.any(String), type: expect.any(String) });
    }
    // A grant whose models are none of the image models: no checkpoint to show, none to run.
    const noImageModel = basic('user', await mint({ kind: 'client', types: ['image'], models: ['mlp'] }));
    expect((await sd('GET', '/sdapi/v1/options', { auth: noImageModel })).json.sd_model_checkpoint).toBeNull();
    expect((await sd('GET', '/sdapi/v1/sd-models', { auth: noImageModel })).json).toEqual([]);
    expect((await sd('POST', '/sdapi/v1/txt2img', { auth: noImageModel, body: { prompt: 'x' } })).json).toMatchObject({ error: 'UNKNOWN_MODEL' });
  });
});

describe('a door its owner opened to a network (mesh.yaml doors.a1111)', () => {
  it('takes requests without credentials from there as the door\'s own narrowed grant; a wrong credential is still refused', async () => {
    const open = await startMesh({ config: { doors: { a1111: { openTo: ['127.0.0.1/32'], caveats: ['types image', 'rate 30/m'] } } } });
    try {
      const call = async (auth: string | null, path: string, body?: unknown): Promise<{ status: number; json: any }> => {
        const response = await fetch(`${open.url}${path}`, {
          method: body === undefined ? 'GET' : 'POST', body: body === undefined ? undefined : JSON.stringify(body),
          headers: { ...(auth === null ? {} : { authorization: auth }), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        });
        return { status: response.status, json: await response.json() };
      };
      // SillyTavern's default: an empty Basic.
      expect((await call('Basic ', '/sdapi/v1/options')).json.sd_model_checkpoint).toMatch(/^gen \[/);
      const made = await call(null, '/sdapi/v1/txt2img', { prompt: 'from the home network', width: 32, height: 32, steps: 2 });
      expect(made.status, JSON.stringify(made.json)).toBe(200);
      expect(await pictureOf(made.json.images[0])).toMatchObject({ width: 32, height: 32 });
      expect((await call(basic('user', 'not-a-grant'), '/sdapi/v1/options')).status).toBe(401);
    } finally {
      await open.stop();
      removeDir(open.data);
    }
  }, 120_000);
});
