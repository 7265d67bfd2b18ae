/**
 * `gen`: the embedded text-to-image generator.
 *
 * The prompt and seed fix a latent vector (`latentFor`). A compositional
 * pattern-producing network (CPPN: pixel coordinates + latent → colour) renders
 * it in refinement steps (`GEN_DEFAULT_STEPS` for a full render). Step s adds
 * one band to a 3-channel canvas: the network evaluated on random Fourier
 * features of the coordinates at frequency 2^s (rotated by s golden angles),
 * scaled by an amplitude that falls with s. The first step lays down the
 * coarse shapes and the colours; every later step adds finer detail, steered
 * by the canvas so far (it feeds back into the first layer).
 *
 * One ONNX run is one step for a whole batch:
 *
 *   inputs   latent     float32 [batch, 16]           per image (latentsFor)
 *            coords     float32 [pixels, 3]           (x, y, r), shared (coordsFor)
 *            canvas     float32 [batch, pixels, 3]    zeros at step 0, then the last canvas_out
 *            octave     float32 [1]                   the step index s, shared
 *   outputs  canvas_out float32 [batch, pixels, 3]    canvas + band_s
 *            rgb        uint8   [batch, pixels, 3]    the displayable image of canvas_out
 *
 * Network, per step:
 *   shared by the batch  features = [x, y, r, sin(2^s P·c + s φ), cos(…)]      [pixels, 3 + 2K]
 *                        h = tanh(features W0 + b0) W1 + b1                     [pixels, H]
 *   per image            a1 = tanh(h ⊙ gain(latent) + z1(latent) + canvas Wf)   [batch, pixels, H]
 *                        a2 = tanh(a1 W2 + z2(latent))
 *                        band = a2 · Wout(latent, s)                           [batch, pixels, 3]
 * The coordinate network runs once per batch, which is where batching gains.
 * The display maps the canvas through a cosine palette: channel 0 moves along
 * the palette, channel 2 sets the palette's phases (per image, mostly), and
 * channel 1 adds light and shade. The latent also offsets all three channels,
 * so different prompts get different colours as well as different shapes.
 *
 * The weights come from a fixed-seed PRNG using exact arithmetic only, so the
 * file (and its SHA-256) is the same on every build and machine.
 */
import { createHash } from 'node:crypto';
import { GraphBuilder, elemTypeCode, int } from './onnx-graph.js';
import { Prng } from './prng.js';

/** Length of the latent vector of one image. */
export const GEN_LATENT_DIM = 16;
/** Floats per pixel in `coords` (x, y, r). */
export const GEN_COORD_DIM = 3;
/** Colour channels in `canvas`, `canvas_out` and `rgb`. */
export const GEN_CHANNELS = 3;
/** Refinement steps for a full render (octaves 0 .. GEN_DEFAULT_STEPS-1). */
export const GEN_DEFAULT_STEPS = 6;

/** Network shape and weight scales. Everything here changes the model digest. */
interface GeneratorConfig {
  seed: number;
  /** Random Fourier projections of (x, y, r). */
  fourier: number;
  /** Hidden width. */
  hidden: number;
  /** Std of the Fourier projection weights at octave 0 (radians per unit of x, y). */
  fourierStd: number;
  /** Scale of the radial (r) projections relative to x, y. */
  radialScale: number;
  /** Gain of the shared coordinate layer. */
  gain0: number;
  /** Gain of the coordinate part of layer 1. */
  gain1: number;
  /** Gain of the hidden layer. */
  gainHidden: number;
  /** Std of the latent bias of layer 1. */
  latentStd: number;
  /** Std of the latent bias of layer 2. */
  latentStd2: number;
  /** Per-unit gain of the coordinate part of layer 1: gainBase + latentGain * tanh(latent · w_gain). */
  gainBase: number;
  latentGain: number;
  /** Std of the feedback of the current canvas into layer 1. */
  feedbackStd: number;
  /** Per canvas channel: std of the output layer, per unit of hidden activation. */
  outStd: readonly [number, number, number];
  /** Per canvas channel: std of the per-image offset, added by the first band only. */
  offsetStd: readonly [number, number, number];
  /** Per-image scale of each channel: 1 + scaleStd * tanh(latent · w_scale). */
  scaleStd: number;
  /** Per canvas channel: the amplitude of band s is decay^s. */
  decay: readonly [number, number, number];
  /** Palette cycles per unit of canvas channel 0 (the hue coordinate). */
  hueFreq: number;
  /** Light cycles per unit of canvas channel 1 (the light coordinate). */
  lightFreq: number;
  /** Palette phase of G and B per unit of canvas channel 2 (cycles). */
  phaseFreq: readonly [number, number];
  /** Palette phases of G and B at zero canvas (cycles). */
  phaseBase: readonly [number, number];
  /** colour = mid + swing * cos(hue phase) + light * cos(light phase), in [0, 1] before clipping. */
  mid: number;
  swing: number;
  light: number;
}

const CONFIG: GeneratorConfig = {
  seed: 0x6d657368, // "mesh"
  fourier: 32,
  hidden: 32,
  fourierStd: 1.3,
  radialScale: 0.5,
  gain0: 2,
  gain1: 4,
  gainHidden: 3.5,
  latentStd: 1.8,
  latentStd2: 0.8,
  gainBase: 0,
  latentGain: 1.5,
  feedbackStd: 0.7,
  outStd: [1.3, 1.0, 0.3],
  offsetStd: [1.8, 0.5, 2.0],
  scaleStd: 0.3,
  decay: [0.45, 0.65, 0.5],
  hueFreq: 0.35,
  lightFreq: 0.3,
  phaseFreq: [0.15, 0.3],
  phaseBase: [0.1, 0.2],
  mid: 0.5,
  swing: 0.4,
  light: 0.2,
};

/** Builds the `gen` ONNX model. Deterministic: same bytes on every call and machine. */
export function buildGenerator(): Uint8Array {
  return buildFrom(CONFIG);
}

function buildFrom(c: GeneratorConfig): Uint8Array {
  const rng = new Prng(c.seed);
  const K = c.fourier;
  const H = c.hidden;
  const L = GEN_LATENT_DIM;
  const C = GEN_CHANNELS;
  const F = GEN_COORD_DIM + 2 * K; // features: x, y, r, sin(K), cos(K)
  const ONE = H - 1; // hidden unit of layer 2 held at 1: its output row is a per-image offset
  const TAU = 2 * Math.PI;

  const g = new GraphBuilder(
    'gpumesh_gen',
    'gpumesh built-in CPPN image generator: one refinement step (octave) per run, batch along axis 0.',
  );

  // ---- inputs
  const latent = g.input('latent', 'float32', ['batch', L]);
  const coords = g.input('coords', 'float32', ['pixels', GEN_COORD_DIM]);
  const canvas = g.input('canvas', 'float32', ['batch', 'pixels', C]);
  const octave = g.input('octave', 'float32', [1]);

  // ---- weights (the order of the draws is part of the model definition)
  // Fourier projection of (x, y, r); octave s rotates (x, y) by s golden angles so that
  // the bands do not all stream along the same directions.
  const wx = rng.normals(K, c.fourierStd);
  const wy = rng.normals(K, c.fourierStd);
  const wr = rng.normals(K, c.fourierStd * c.radialScale);
  const zerosK = new Float32Array(K);
  const projA = g.floatInit('w_proj_cos', [GEN_COORD_DIM, K], [...wx, ...wy, ...zerosK]);
  const projB = g.floatInit('w_proj_sin', [GEN_COORD_DIM, K], [...wy, ...wx.map((v) => -v), ...zerosK]);
  const projR = g.floatInit('w_proj_radial', [GEN_COORD_DIM, K], [...zerosK, ...zerosK, ...wr]);
  const phase = g.floatInit('phase_per_octave', [K], rng.uniforms(K, -Math.PI, Math.PI));
  const w0 = g.floatInit('w0', [F, H], rng.normals(F * H, c.gain0 / Math.sqrt(F)));
  const b0 = g.floatInit('b0', [H], rng.normals(H, 0.5));
  const w1 = g.floatInit('w1', [H, H], rng.normals(H * H, c.gain1 / Math.sqrt(H)));
  const b1 = g.floatInit('b1', [H], rng.normals(H, 0.5));
  const wz1 = g.floatInit('wz1', [L, H], rng.normals(L * H, c.latentStd / Math.sqrt(L)));
  const wGain = g.floatInit('w_gain', [L, H], rng.normals(L * H, 1 / Math.sqrt(L)));
  const wFeedback = g.floatInit('w_feedback', [C, H], rng.normals(C * H, c.feedbackStd));
  const w2Data = rng.normals(H * H, c.gainHidden / Math.sqrt(H));
  const wz2Data = rng.normals(L * H, c.latentStd2 / Math.sqrt(L));
  const b2Data = new Float32Array(H);
  for (let i = 0; i < H; i++) w2Data[i * H + ONE] = 0;
  for (let i = 0; i < L; i++) wz2Data[i * H + ONE] = 0;
  b2Data[ONE] = 20; // tanh(20) === 1 in float32
  const w2 = g.floatInit('w2', [H, H], w2Data);
  const wz2 = g.floatInit('wz2', [L, H], wz2Data);
  const b2 = g.floatInit('b2', [H], b2Data);
  const wOutData = rng.normals(H * C, 1 / Math.sqrt(H));
  for (let i = 0; i < H * C; i++) wOutData[i] = (wOutData[i] ?? 0) * (c.outStd[i % C] ?? 0);
  wOutData.fill(0, ONE * C, ONE * C + C);
  const wOut = g.floatInit('w_out', [H, C], wOutData);
  const wScale = g.floatInit('w_scale', [L, C], rng.normals(L * C, 1 / Math.sqrt(L)));
  const wOffsetData = rng.normals(L * C, 1 / Math.sqrt(L));
  for (let i = 0; i < L * C; i++) wOffsetData[i] = (wOffsetData[i] ?? 0) * (c.offsetStd[i % C] ?? 0);
  const wOffset = g.floatInit('w_offset', [L, C], wOffsetData);
  const oneHot = new Float32Array(H);
  oneHot[ONE] = 1;
  const eOne = g.floatInit('e_one', [H, 1], oneHot);

  // display: four phases from the canvas (hue phase of R, G, B; light phase), then
  // colour_k = mid + swing * cos(hue phase_k) + light * cos(light phase), scaled to 0..255
  const [pg, pb] = c.phaseFreq;
  const [dg, db] = c.phaseBase;
  const hf = c.hueFreq;
  // prettier-ignore
  const phaseMatrix = g.floatInit('display_phase_w', [C, 4], [
    hf, hf, hf, 0, // canvas channel 0: hue
    0, 0, 0, c.lightFreq, // channel 1: light
    0, pg, pb, 0, // channel 2: palette phases of G and B
  ].map((v) => TAU * v));
  const phaseBias = g.floatInit('display_phase_b', [4], [0, dg, db, 0].map((v) => TAU * v));
  const s = 255 * c.swing;
  const l = 255 * c.light;
  // prettier-ignore
  const colourMatrix = g.floatInit('display_colour_w', [4, C], [
    s, 0, 0,
    0, s, 0,
    0, 0, s,
    l, l, l,
  ]);
  // + 0.5: Cast truncates, so this rounds
  const colourBias = g.floatInit('display_colour_b', [C], [0, 0, 0].map(() => 255 * c.mid + 0.5));

  // ---- scalars and shapes
  const one = g.floatInit('one', [1], [1]);
  const two = g.floatInit('two', [1], [2]);
  const decay = g.floatInit('decay', [C], c.decay);
  const goldenAngle = g.floatInit('golden_angle', [1], [Math.PI * (3 - Math.sqrt(5))]);
  const gainBase = g.floatInit('gain_base', [1], [c.gainBase]);
  const latentGain = g.floatInit('latent_gain', [1], [c.latentGain]);
  const scaleStd = g.floatInit('scale_std', [1], [c.scaleStd]);
  const lo = g.floatInit('clip_lo', [], [0]);
  const hi = g.floatInit('clip_hi', [], [255]);
  const axis1 = g.int64Init('axis_1', [1], [1]);
  const flatShape = g.int64Init('flat_shape', [2], [-1, C]);

  // ---- per-step scalars: frequency 2^s, amplitude decay^s, rotation and phase shift
  const freq = g.op('Pow', [two, octave], {}, 'freq');
  const amp = g.op('Pow', [decay, octave], {}, 'amp');
  const shift = g.op('Mul', [octave, phase], {}, 'phase_shift');
  const angle = g.op('Mul', [octave, goldenAngle], {}, 'angle');
  const wProj = g.op(
    'Add',
    [g.op('Add', [g.op('Mul', [projA, g.op('Cos', [angle])]), g.op('Mul', [projB, g.op('Sin', [angle])])]), projR],
    {},
    'w_proj',
  );

  // ---- coordinate network, shared by the batch: [pixels, H]
  const proj = g.op('MatMul', [coords, wProj], {}, 'proj');
  const arg = g.op('Add', [g.op('Mul', [proj, freq]), shift], {}, 'fourier_arg');
  const features = g.op(
    'Concat',
    [coords, g.op('Sin', [arg], {}, 'fourier_sin'), g.op('Cos', [arg], {}, 'fourier_cos')],
    { axis: int(1) },
    'features',
  );
  const c0 = g.op('Tanh', [g.op('Gemm', [features, w0, b0])], {}, 'coord_hidden');
  const h1Coords = g.op('Gemm', [c0, w1, b1], {}, 'h1_coords');

  // ---- per-image terms from the latent
  const z1 = g.op('Unsqueeze', [g.op('MatMul', [latent, wz1]), axis1], {}, 'z1'); // [batch, 1, H]
  const z2 = g.op('Unsqueeze', [g.op('Gemm', [latent, wz2, b2]), axis1], {}, 'z2'); // [batch, 1, H]
  const gainImg = g.op(
    'Unsqueeze',
    [g.op('Add', [gainBase, g.op('Mul', [g.op('Tanh', [g.op('MatMul', [latent, wGain])]), latentGain])]), axis1],
    {},
    'gain_image',
  ); // [batch, 1, H]
  const scaleImg = g.op(
    'Unsqueeze',
    [g.op('Add', [one, g.op('Mul', [g.op('Tanh', [g.op('MatMul', [latent, wScale])]), scaleStd])]), axis1],
    {},
    'scale_image',
  ); // [batch, 1, 3]
  const offsetImg = g.op('Unsqueeze', [g.op('MatMul', [latent, wOffset]), axis1], {}, 'offset'); // [batch, 1, 3]
  // per-image output layer of this step [batch, H, 3]: w_out scaled per channel and by the
  // band amplitude; its row ONE (a constant hidden unit) adds the offset, at step 0 only
  const firstStep = g.op('Relu', [g.op('Sub', [one, octave])], {}, 'first_step'); // 1 at s = 0, else 0
  const outImg = g.op(
    'Add',
    [g.op('Mul', [wOut, g.op('Mul', [scaleImg, amp])]), g.op('MatMul', [eOne, g.op('Mul', [offsetImg, firstStep])])],
    {},
    'w_out_image',
  );

  // ---- the per-image network over [batch, pixels, H]; layer 1 also sees the canvas so far
  const pre1 = g.op('Add', [g.op('Add', [g.op('Mul', [h1Coords, gainImg]), z1]), g.op('MatMul', [canvas, wFeedback])]);
  const a1 = g.op('Tanh', [pre1], {}, 'a1');
  const a2 = g.op('Tanh', [g.op('Add', [g.op('MatMul', [a1, w2]), z2])], {}, 'a2');
  const band = g.op('MatMul', [a2, outImg], {}, 'band'); // [batch, pixels, 3]
  const canvasOut = g.op('Add', [canvas, band], {}, 'canvas_out');

  // ---- display, on a flat [batch * pixels, 3] view (2-D Gemms, no small broadcasts)
  const flat = g.op('Reshape', [canvasOut, flatShape], {}, 'canvas_flat');
  const phases = g.op('Cos', [g.op('Gemm', [flat, phaseMatrix, phaseBias])], {}, 'display_cos');
  const colour = g.op('Gemm', [phases, colourMatrix, colourBias], {}, 'display_colour');
  const pixels = g.op('Cast', [g.op('Clip', [colour, lo, hi])], { to: int(elemTypeCode('uint8')) }, 'rgb_flat');
  g.op('Reshape', [pixels, g.op('Shape', [canvasOut])], {}, 'rgb');

  g.output('canvas_out', 'float32', ['batch', 'pixels', C]);
  g.output('rgb', 'uint8', ['batch', 'pixels', C]);
  return g.toBytes();
}

/**
 * The latent of one image: standard-normal values drawn from SHA-256 of the
 * seed and the prompt (UTF-8, used exactly as given). Same prompt and seed,
 * same latent. `seed` must be a safe integer.
 */
export function latentFor(prompt: string, seed: number): Float32Array {
  if (!Number.isSafeInteger(seed)) throw new RangeError(`seed must be a safe integer, got ${seed}`);
  const key = createHash('sha256').update(`gpumesh/gen/latent/v1\0${seed}\0`).update(prompt, 'utf8').digest();
  const out = new Float32Array(GEN_LATENT_DIM);
  let filled = 0;
  for (let block = 0; filled < GEN_LATENT_DIM; block++) {
    const counter = Buffer.alloc(4);
    counter.writeUInt32LE(block);
    const bytes = createHash('sha256').update(key).update(counter).digest();
    // 8 words per block → 4 Box–Muller pairs → 8 normals
    for (let w = 0; w + 1 < 8 && filled < GEN_LATENT_DIM; w += 2) {
      const u1 = (bytes.readUInt32LE(w * 4) + 0.5) / 4294967296; // (0, 1)
      const u2 = (bytes.readUInt32LE(w * 4 + 4) + 0.5) / 4294967296;
      const r = Math.sqrt(-2 * Math.log(u1));
      out[filled++] = r * Math.cos(2 * Math.PI * u2);
      if (filled < GEN_LATENT_DIM) out[filled++] = r * Math.sin(2 * Math.PI * u2);
    }
  }
  return out;
}

/**
 * The latent of frame `frame` of a `frames`-frame clip: a walk round a closed loop through latent space,
 * a·cos θ + b·sin θ with θ = 2π·frame/frames, where a = latentFor(prompt, seed) and b is a second latent drawn
 * from the same prompt and seed under another name. Frame 0 is the image `latentFor` gives, the clip loops
 * without a jump (the frame after the last would be frame 0), and since a and b are independent standard
 * normals every point of the loop is one too, so each frame looks like one of gen's images.
 */
export function walkLatent(prompt: string, seed: number, frame: number, frames: number): Float32Array {
  if (!Number.isSafeInteger(frames) || frames < 1 || !Number.isSafeInteger(frame) || frame < 0 || frame >= frames) {
    throw new RangeError(`frame ${frame} of ${frames} is not a frame of the clip`);
  }
  const start = latentFor(prompt, seed);
  const direction = latentFor(`gpumesh/gen/walk/v1\0${prompt}`, seed);
  const theta = (2 * Math.PI * frame) / frames;
  const [cos, sin] = [Math.cos(theta), Math.sin(theta)];
  const out = new Float32Array(GEN_LATENT_DIM);
  for (let i = 0; i < GEN_LATENT_DIM; i++) out[i] = start[i]! * cos + direction[i]! * sin;
  return out;
}

/** Latents of a batch, concatenated: [items.length, GEN_LATENT_DIM] row-major. */
export function latentsFor(items: ReadonlyArray<{ readonly prompt: string; readonly seed: number }>): Float32Array {
  const out = new Float32Array(items.length * GEN_LATENT_DIM);
  items.forEach((item, i) => out.set(latentFor(item.prompt, item.seed), i * GEN_LATENT_DIM));
  return out;
}

/**
 * Pixel coordinates for a width × height image: row-major [height * width, 3]
 * of (x, y, r) at pixel centres. The longer side spans [-1, 1] and pixels are
 * square, so a non-square image shows a crop of the square one.
 */
export function coordsFor(width: number, height: number): Float32Array {
  if (!Number.isSafeInteger(width) || !Number.isSafeInteger(height) || width < 1 || height < 1) {
    throw new RangeError(`bad image size ${width}x${height}`);
  }
  const side = Math.max(width, height);
  const out = new Float32Array(width * height * GEN_COORD_DIM);
  let o = 0;
  for (let row = 0; row < height; row++) {
    const y = (2 * row + 1 - height) / side;
    for (let col = 0; col < width; col++) {
      const x = (2 * col + 1 - width) / side;
      out[o++] = x;
      out[o++] = y;
      out[o++] = Math.sqrt(x * x + y * y);
    }
  }
  return out;
}

/** The colour (0..1 per channel) the display maps one canvas point to: the network's own palette, in code. */
function paletteOf(c0: number, c1: number, c2: number, out: Float64Array): void {
  const TAU = 2 * Math.PI;
  const { hueFreq, lightFreq, phaseFreq, phaseBase, mid, swing, light } = CONFIG;
  const lightTerm = light * Math.cos(TAU * lightFreq * c1);
  out[0] = mid + swing * Math.cos(TAU * hueFreq * c0) + lightTerm;
  out[1] = mid + swing * Math.cos(TAU * (hueFreq * c0 + phaseFreq[0] * c2 + phaseBase[0])) + lightTerm;
  out[2] = mid + swing * Math.cos(TAU * (hueFreq * c0 + phaseFreq[1] * c2 + phaseBase[1])) + lightTerm;
}

/** Cells per colour channel of the inverse palette's table. */
const INVERSE_CELLS = 32;
let inverseTable: Float32Array | null = null;

/**
 * The inverse of the palette as a table: for each cell of a 32³ grid of colours, a canvas point whose display falls in
 * it (of those sampled over one period of each channel, the one nearest the cell's centre; a colour the palette never
 * shows takes its nearest shown neighbour's). Built once per worker process (110,592 palette samples).
 */
function paletteInverse(): Float32Array {
  if (inverseTable) return inverseTable;
  const cells = INVERSE_CELLS;
  const table = new Float32Array(cells ** 3 * 3);
  const best = new Float64Array(cells ** 3).fill(Infinity);
  const colour = new Float64Array(3);
  // One period of each channel, centred on 0: the small canvas values the generator's own bands start from.
  const half = [0.5 / CONFIG.hueFreq, 0.5 / CONFIG.lightFreq, 0.5 / CONFIG.phaseFreq[0]];
  const samples = 48;
  for (let a = 0; a < samples; a++) {
    for (let b = 0; b < samples; b++) {
      for (let d = 0; d < samples; d++) {
        const c0 = -half[0]! + (2 * half[0]! * a) / (samples - 1);
        const c1 = -half[1]! + (2 * half[1]! * b) / (samples - 1);
        const c2 = -half[2]! + (2 * half[2]! * d) / (samples - 1);
        paletteOf(c0, c1, c2, colour);
        let cell = 0;
        let distance = 0;
        for (let k = 0; k < 3; k++) {
          const value = Math.min(1, Math.max(0, colour[k]!));
          const index = Math.min(cells - 1, Math.floor(value * cells));
          cell = cell * cells + index;
          distance += (value - (index + 0.5) / cells) ** 2;
        }
        if (distance < best[cell]!) {
          best[cell] = distance;
          table[cell * 3] = c0;
          table[cell * 3 + 1] = c1;
          table[cell * 3 + 2] = c2;
        }
      }
    }
  }
  // Colours the palette never shows take a neighbour's point, spreading outwards a ring at a time.
  for (let pass = 0; pass < cells && best.includes(Infinity); pass++) {
    const filled = best.map((value) => (Number.isFinite(value) ? 1 : 0));
    for (let cell = 0; cell < best.length; cell++) {
      if (filled[cell]) continue;
      const r = Math.floor(cell / (cells * cells));
      const g = Math.floor(cell / cells) % cells;
      const bl = cell % cells;
      for (const [dr, dg, db] of [[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]] as const) {
        const nr = r + dr;
        const ng = g + dg;
        const nb = bl + db;
        if (nr < 0 || ng < 0 || nb < 0 || nr >= cells || ng >= cells || nb >= cells) continue;
        const neighbour = (nr * cells + ng) * cells + nb;
        if (!filled[neighbour]) continue;
        best[cell] = best[neighbour]! + 1;
        table.copyWithin(cell * 3, neighbour * 3, neighbour * 3 + 3);
        break;
      }
    }
  }
  return (inverseTable = table);
}

/**
 * A canvas whose display is as close to a picture as the palette allows (image-to-image starts the refinement from
 * it): per pixel, the inverse palette's table gives a starting point, and two damped Gauss–Newton steps on the three
 * canvas channels bring its colour closer. `rgb` is row-major, 3 bytes a pixel.
 */
export function canvasFor(rgb: Uint8Array): Float32Array {
  const table = paletteInverse();
  const cells = INVERSE_CELLS;
  const pixels = rgb.length / 3;
  const canvas = new Float32Array(pixels * 3);
  const colour = new Float64Array(3);
  const probe = new Float64Array(3);
  const jacobian = new Float64Array(9);
  const a = new Float64Array(9);
  const b = new Float64Array(3);
  const c = new Float64Array(3);
  const residual = new Float64Array(3);
  const h = 1e-3;
  for (let p = 0; p < pixels; p++) {
    let cell = 0;
    for (let k = 0; k < 3; k++) cell = cell * cells + Math.min(cells - 1, (rgb[p * 3 + k]! * cells) >> 8);
    c[0] = table[cell * 3]!;
    c[1] = table[cell * 3 + 1]!;
    c[2] = table[cell * 3 + 2]!;
    for (let iteration = 0; iteration < GAUSS_NEWTON_STEPS; iteration++) {
      paletteOf(c[0], c[1], c[2], colour);
      for (let k = 0; k < 3; k++) residual[k] = colour[k]! - rgb[p * 3 + k]! / 255;
      if (Math.abs(residual[0]!) + Math.abs(residual[1]!) + Math.abs(residual[2]!) < 0.01) break;
      for (let k = 0; k < 3; k++) {
        c[k]! += h;
        paletteOf(c[0], c[1], c[2], probe);
        c[k]! -= h;
        for (let row = 0; row < 3; row++) jacobian[row * 3 + k] = (probe[row]! - colour[row]!) / h;
      }
      // (JᵀJ + λI) δ = −Jᵀr
      a.fill(0);
      b.fill(0);
      for (let i = 0; i < 3; i++) {
        for (let j = 0; j < 3; j++) for (let row = 0; row < 3; row++) a[i * 3 + j]! += jacobian[row * 3 + i]! * jacobian[row * 3 + j]!;
        a[i * 3 + i]! += 0.05;
        for (let row = 0; row < 3; row++) b[i]! -= jacobian[row * 3 + i]! * residual[row]!;
      }
      solve3(a, b, c);
    }
    canvas[p * 3] = c[0];
    canvas[p * 3 + 1] = c[1];
    canvas[p * 3 + 2] = c[2];
  }
  return canvas;
}

/** Refinement steps after the table's guess: one brings the display within about a level of 255 of the picture. */
const GAUSS_NEWTON_STEPS = 1;

/** Add to `c` the x of a x = b for a 3 × 3 system (Cramer's rule; the damping keeps it regular), each step at most 0.5. */
function solve3(a: Float64Array, b: Float64Array, c: Float64Array): void {
  const det = (m00: number, m01: number, m02: number, m10: number, m11: number, m12: number, m20: number, m21: number, m22: number): number =>
    m00 * (m11 * m22 - m12 * m21) - m01 * (m10 * m22 - m12 * m20) + m02 * (m10 * m21 - m11 * m20);
  const [a0, a1, a2, a3, a4, a5, a6, a7, a8] = a as unknown as number[];
  const whole = det(a0!, a1!, a2!, a3!, a4!, a5!, a6!, a7!, a8!);
  const x0 = det(b[0]!, a1!, a2!, b[1]!, a4!, a5!, b[2]!, a7!, a8!) / whole;
  const x1 = det(a0!, b[0]!, a2!, a3!, b[1]!, a5!, a6!, b[2]!, a8!) / whole;
  const x2 = det(a0!, a1!, b[0]!, a3!, a4!, b[1]!, a6!, a7!, b[2]!) / whole;
  c[0]! += Math.max(-0.5, Math.min(0.5, x0));
  c[1]! += Math.max(-0.5, Math.min(0.5, x1));
  c[2]! += Math.max(-0.5, Math.min(0.5, x2));
}
