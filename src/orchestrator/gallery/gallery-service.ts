import type { VerifiedGrant } from '../auth/index.js';
import type { Authorize, JobService } from '../jobs/index.js';
import * as artifacts from '../store/artifacts.js';
import type { Db, GroupCommit } from '../store/db.js';
import type { Thumbnails } from './thumbnails.js';

export interface GalleryServiceDeps {
  db: Db;
  commits: GroupCommit;
  jobs: JobService;
  thumbnails: Thumbnails;
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

  view(grant: VerifiedGrant, authorize: Authorize, defaultAlbum: string): GalleryView {
    const may = (action: 'jobs:submit' | 'artifacts:delete'): boolean => {
      try {
        authorize({ action });
        return true;
      } catch {
        return false;
      }
    };
    const present = artifacts.albumsWithArtifacts(this.#deps.db);
    const albums = grant.albums === null ? [...new Set([defaultAlbum, ...present])].sort() : [...grant.albums].sort();
    return { albums, defaultAlbum, may: { submit: may('jobs:submit'), delete: may('artifacts:delete') } };
  }

  /**
   * Delete a job's published results: they leave the gallery, its listings and the job's view, and a grant limited
   * to albums no longer reads their blobs. The blobs themselves stay in the store, where another result or a job's
   * input may name the same bytes; their thumbnails go once no result names them. Returns the digests removed.
   */
  async remove(grant: VerifiedGrant, jobId: string, authorize: Authorize): Promise<string[]> {
    const job = this.#deps.jobs.record(grant, jobId);
    authorize({ action: 'artifacts:delete', jobType: job.type, model: job.model, album: job.album });
    const digests = this.#deps.commits.write(() => artifacts.deleteArtifactsOfJob(this.#deps.db, jobId));
    const orphans = digests.filter((digest) => !artifacts.digestPublished(this.#deps.db, digest));
    await Promise.all(orphans.map((digest) => this.#deps.thumbnails.forget(digest)));
    return digests;
  }
}
