import type { ArtifactPage, GalleryView, RemovedResults } from '../../protocol/api/index.js';
import type { VerifiedGrant } from '../auth/index.js';
import type { BlobReclaimer } from '../blobs/reclaim.js';
import { artifactView, type Authorize, type JobReads } from '../jobs/index.js';
import { decodeCursor, encodeCursor, type Commits, type MeshStore } from '../store/index.js';
import type { Thumbnails } from './thumbnails.js';

export interface GalleryServiceDeps {
  store: MeshStore;
  commits: Commits;
  /** Finds a job the grant may see (deleting its results starts there). */
  jobs: Pick<JobReads, 'record'>;
  thumbnails: Thumbnails;
  reclaimer: BlobReclaimer;
}

/** What `GET /v1/artifacts` takes: a page size, where the last page ended, an album, text in the prompt. */
export interface ArtifactQuery {
  limit: number;
  cursor?: string;
  album?: string;
  q?: string;
}

/**
 * What the gallery page asks: the published results a grant may see (the listing), the albums it may switch between,
 * and deleting a job's published results.
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
   * Published results the grant may see, newest first, by keyset (`cursor`: continue before a sequence number), so a
   * page costs the same at result 10,000 as at result 1; `album` narrows to one album (within the grant's), `q` to
   * prompts holding it.
   */
  async artifacts(grant: VerifiedGrant, query: ArtifactQuery): Promise<ArtifactPage> {
    const albums = query.album === undefined ? grant.albums : grant.albums === null || grant.albums.includes(query.album) ? [query.album] : [];
    const records = await this.#deps.store.artifacts.listArtifacts({
      types: grant.types, models: grant.models, albums, limit: query.limit, prompt: query.q || undefined,
      beforeSeq: query.cursor ? decodeCursor(query.cursor) : undefined,
    });
    const last = records.at(-1);
    return { artifacts: records.map(artifactView), nextCursor: records.length === query.limit && last ? encodeCursor(last.seq) : null };
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
    return { jobId, deleted: digests, ...await this.#deps.reclaimer.release(orphans) };
  }
}
