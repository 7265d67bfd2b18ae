import type { VerifiedGrant } from '../auth/index.js';
import type { BlobReclaimer, Reclaimed } from '../blobs/reclaim.js';
import type { Authorize, JobService } from '../jobs/index.js';
import type { Commits, MeshStore } from '../store/index.js';
import type { Thumbnails } from './thumbnails.js';

export interface GalleryServiceDeps {
  store: MeshStore;
  commits: Commits;
  jobs: JobService;
  thumbnails: Thumbnails;
  reclaimer: BlobReclaimer;
}

/** What deleting a job's results did: the digests that left its view, and those whose bytes left the store. */
export interface RemovedResults extends Reclaimed {
  deleted: string[];
}

/** What the gallery page asks first: the albums it may switch between, and whether this grant may delete. */
export interface GalleryView {
  /** Albums the grant may see that hold results, and any it is limited to (empty ones included: it may submit there). */
  albums: string[];
  /** The album a job that names none goes to. */
  defaultAlbum: string;
  may: { submit: boolean; delete: boolean };
}

/**
 * The gallery's own work beside the job listing (JobService.artifacts): the albums a grant may switch between, and
 * deleting a job's published results.
 */
export class GalleryService {
  readonly #deps: GalleryServiceDeps;

  constructor(deps: GalleryServiceDeps) {
    this.#deps = deps;
  }

  async view(grant: VerifiedGrant, authorize: Authorize, defaultAlbum: string): Promise<GalleryView> {
    const may = (action: 'jobs:submit' | 'artifacts:delete'): boolean => {
      try {
        authorize({ action });
        return true;
      } catch {
        return false;
      }
    };
    const present = await this.#deps.store.artifacts.albumsWithArtifacts();
    const albums = grant.albums === null ? [...new Set([defaultAlbum, ...present])].sort() : [...grant.albums].sort();
    return { albums, defaultAlbum, may: { submit: may('jobs:submit'), delete: may('artifacts:delete') } };
  }

  /**
   * Delete a job's published results: they leave the gallery, its listings and the job's view, and the job no longer
   * names them; their thumbnails go once no result names them, and their bytes once nothing does (BlobReclaimer:
   * another result, a client's file or a job's input may be the same bytes). The job itself stays.
   */
  async remove(grant: VerifiedGrant, jobId: string, authorize: Authorize): Promise<RemovedResults> {
    const job = await this.#deps.jobs.record(grant, jobId);
    authorize({ action: 'artifacts:delete', jobType: job.type, model: job.model, album: job.album });
    const { store, commits } = this.#deps;
    const digests = [...new Set((await store.artifacts.artifactsOfJob(jobId)).map((artifact) => artifact.digest))];
    commits.write(() => {
      store.artifacts.deleteArtifactsOfJob(jobId);
      store.blobs.forgetUploads(jobId, digests);
    });
    await commits.durable();
    const published = await Promise.all(digests.map((digest) => store.artifacts.digestPublished(digest)));
    const orphans = digests.filter((_, index) => !published[index]);
    await Promise.all(orphans.map((digest) => this.#deps.thumbnails.forget(digest)));
    return { deleted: digests, ...await this.#deps.reclaimer.release(orphans) };
  }
}
