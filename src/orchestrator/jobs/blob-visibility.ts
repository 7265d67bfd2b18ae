import { assertDigest, MeshError, modelDigests, VERSION_SEPARATOR } from '../../protocol/index.js';
import type { VerifiedGrant } from '../auth/index.js';
import type { ModelRegistry } from '../registry/index.js';
import type { MeshStore } from '../store/index.js';

export interface BlobVisibilityDeps {
  store: MeshStore;
  registry: ModelRegistry;
}

/** The hosts an agent grant may be (its `host` caveats); null: any. */
function agentHosts(grant: VerifiedGrant): string[] | null {
  const hosts = grant.caveats.flatMap((caveat) => (caveat.condition === 'host' ? [caveat.value] : []));
  return hosts.length > 0 ? hosts : null;
}

/**
 * Which blobs a grant may read. Blobs are shared by digest, so a grant limited to albums, types or models may read
 * only the blobs published as artifacts within them — and, limited by models alone (an agent grant's `models`), the
 * files of those models; anything else is 404, as if it did not exist. Grants with none of the three (agents, admin,
 * unscoped clients) read any blob. Asked by the blob routes, the thumbnails and admission (a picture a job names).
 */
export class BlobVisibility {
  readonly #deps: BlobVisibilityDeps;

  constructor(deps: BlobVisibilityDeps) {
    this.#deps = deps;
  }

  /** NOT_FOUND (or BAD_DIGEST) unless the grant may read the blob. */
  async assertVisible(grant: VerifiedGrant, digest: string): Promise<void> {
    const { albums, types, models } = grant;
    if (albums === null && types === null && models === null) return;
    assertDigest(digest);
    const { store } = this.#deps;
    // What its own lineage stored (an input it uploaded), it may read back.
    if (await store.clientBlobs.storedBy(digest, grant.id)) return;
    // A host reads the pictures of the jobs it was sent (an agent grant limited to models).
    if (grant.kind === 'agent' && await store.inputImages.inputOfJobOn(digest, agentHosts(grant))) return;
    // A model's own files (its file, or its index and members), to a grant that may have the model (an agent pulling
    // them; an album-limited grant never).
    if (albums === null && types === null && models!.some((name) => this.#modelHolds(name, digest))) return;
    if (!(await store.artifacts.digestPublishedIn(digest, { albums, types, models }))) {
      throw new MeshError('NOT_FOUND', { what: `Blob ${digest}` });
    }
  }

  /** Whether a blob is one of a model's files (a grant's `models` names models, not versions: every version's count). */
  #modelHolds(name: string, digest: string): boolean {
    const { registry } = this.#deps;
    const versions = registry.family(name)?.versions.map((version) => `${name}${VERSION_SEPARATOR}${version}`) ?? [name];
    return versions.some((version) => {
      const manifest = registry.get(version)?.manifest;
      return manifest !== undefined && modelDigests(manifest).includes(digest);
    });
  }
}
