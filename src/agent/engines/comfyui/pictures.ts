import type { EngineJob } from '../../core/engine.js';
import { maskAsPng, pictureAsPng } from '../kit/picture-png.js';
import type { PictureInput } from '../../../protocol/engines/comfyui.js';
import type { ComfyClient, Uploaded } from './client.js';

/** Where in ComfyUI's input folder the mesh's pictures go: one subfolder, so an owner can find (and clear) them. */
export const UPLOAD_SUBFOLDER = 'gpumesh';

/** The name a LoadImage node gives an uploaded file: `subfolder/name`. */
const loadName = (file: Uploaded): string => (file.subfolder ? `${file.subfolder}/${file.name}` : file.name);

/**
 * The job's pictures uploaded to ComfyUI under names of the job's own (`gpumesh/gpumesh-<job>-image.png`), as the
 * names its LoadImage nodes take. The picture goes to `/upload/image`; a mask to `/upload/mask`, which lays the mask's
 * alpha over the uploaded picture — transparent marks what to repaint, in gpumesh's convention and in ComfyUI's
 * (its mask is 1 − alpha). ComfyUI has no route that deletes an input file: the files stay until its owner clears
 * the folder, and a retried job overwrites its own.
 */
export async function uploadPictures(client: ComfyClient, job: EngineJob): Promise<Partial<Record<PictureInput, string>>> {
  const { image, mask } = job.pictures ?? {};
  if (!image) return {};
  const stem = stemOf(job);
  const picture = await client.uploadImage(await pictureAsPng(image), `${stem}-image.png`, UPLOAD_SUBFOLDER);
  const names: Partial<Record<PictureInput, string>> = { image: loadName(picture) };
  if (mask) names.mask = loadName(await client.uploadMask(await maskAsPng(mask), `${stem}-mask.png`, UPLOAD_SUBFOLDER, picture));
  return names;
}

/** The start of the names a job's uploads get: `gpumesh-<job id>`. */
const stemOf = (job: EngineJob): string => `gpumesh-${job.id.replace(/[^\w.-]/g, '_')}`;

/**
 * A workflow job's pictures (`pictures`: each by its name in the workflow) uploaded to ComfyUI under names of the
 * job's own (`gpumesh/gpumesh-<job>-<n>.png`), alpha and all: the name in the workflow → the name its nodes must now
 * say. A mask a client drew is a picture with alpha too: its LoadImage reads the mask from it.
 */
export async function uploadWorkflowPictures(client: ComfyClient, job: EngineJob): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  for (const [field, picture] of Object.entries(job.pictures ?? {})) {
    if (!field.startsWith('pictures.')) continue;
    const uploaded = await client.uploadImage(await pictureAsPng(picture), `${stemOf(job)}-${names.size}.png`, UPLOAD_SUBFOLDER);
    names.set(field.slice('pictures.'.length), loadName(uploaded));
  }
  return names;
}
