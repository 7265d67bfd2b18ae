import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MeshError } from '../../protocol/index.js';
import { DOORS, type DoorName, type OpenDoorView } from '../../protocol/api/index.js';
import { inspectGrant } from '../../protocol/grant-token.js';
import { Networks } from '../../net/networks.js';
import type { AuditLog } from './audit.js';
import { parseCaveat, scopeProblem, type Caveat } from './caveats.js';
import type { GrantAuthority } from './grants.js';
import type { GrantIssuer } from './issuer.js';

export { DOORS, type DoorName, type OpenDoorView };

/** mesh.yaml's `doors.<name>`: the networks whose requests without credentials act as a grant with these caveats. */
export interface DoorSetting {
  openTo: readonly string[];
  caveats: readonly string[];
}

interface OpenDoor {
  networks: Networks;
  token: string;
  view: OpenDoorView;
}

export interface OpenDoorsDeps {
  issuer: Pick<GrantIssuer, 'mintNow' | 'revoke'>;
  authority: Pick<GrantAuthority, 'isRevoked'>;
  audit: Pick<AuditLog, 'record'>;
  /** The data folder: each open door's grant is kept in `doors/<name>.grant` (mode 0600) across restarts. */
  data: string;
}

/** The caveats of a door's setting, checked as the grant's minting would check them: a bad one stops the start. */
function checkedCaveats(door: DoorName, lines: readonly string[]): string[] {
  const caveats: Caveat[] = [{ condition: 'kind', value: 'client' }];
  for (const line of lines) {
    const caveat = parseCaveat(line);
    if (typeof caveat === 'string') throw new MeshError('VALIDATION_FAILED', { detail: `doors.${door}.caveats: ${caveat}` });
    if (caveat.condition === 'kind') throw new MeshError('VALIDATION_FAILED', { detail: `doors.${door}.caveats: an open door's grant is a client grant; leave "kind" out` });
    caveats.push(caveat);
  }
  const problem = scopeProblem(caveats);
  if (problem) throw new MeshError('VALIDATION_FAILED', { detail: `doors.${door}.caveats: ${problem}` });
  return [...lines];
}

/**
 * The doors an owner opened to networks for clients that cannot send a grant (SillyTavern's ComfyUI client sends no
 * credentials). Each open door has a client grant of its own, narrowed by the configured caveats and minted by the
 * orchestrator like any other (listed, revocable, in the audit log); a request through the door from one of its
 * networks without credentials acts as that grant, so every caveat, cap and audit rule applies to it. The grant is
 * kept in the data folder and used again while the caveats stay the same; changed caveats revoke it and mint anew,
 * and a door closed in the config has its grant revoked at the next start.
 */
export class OpenDoors {
  readonly #open = new Map<DoorName, OpenDoor>();

  private constructor() {}

  /** Open the configured doors (minting or reusing their grants) and close the rest. */
  static async open(settings: Record<DoorName, DoorSetting>, deps: OpenDoorsDeps): Promise<OpenDoors> {
    const doors = new OpenDoors();
    const folder = join(deps.data, 'doors');
    for (const door of DOORS) {
      const setting = settings[door];
      const file = join(folder, `${door}.grant`);
      const kept = existsSync(file) ? readFileSync(file, 'utf8').trim() : null;
      if (setting.openTo.length === 0) {
        if (kept !== null) await closeKept(door, kept, file, deps);
        continue;
      }
      const caveats = checkedCaveats(door, setting.caveats);
      let token = kept !== null && reusable(kept, caveats, deps) ? kept : null;
      if (token === null) {
        if (kept !== null) await closeKept(door, kept, file, deps);
        token = deps.issuer.mintNow('client', caveats, `open door: ${door}`).token;
        mkdirSync(folder, { recursive: true, mode: 0o700 });
        writeFileSync(`${file}.${process.pid}.tmp`, `${token}\n`, { mode: 0o600 });
        renameSync(`${file}.${process.pid}.tmp`, file);
      }
      const view: OpenDoorView = { door, openTo: [...setting.openTo], grantId: inspectGrant(token).id, caveats };
      doors.#open.set(door, { networks: new Networks(setting.openTo), token, view });
      deps.audit.record({ event: 'door:opened', grantId: view.grantId, detail: `the ${door} door takes requests without credentials from ${view.openTo.join(', ')} as this grant (${caveats.join('; ')})` });
    }
    return doors;
  }

  /** The grant a request through `door` from `address` acts as when it carries no credentials; null when none. */
  grantFor(door: DoorName, address: string): string | null {
    const open = this.#open.get(door);
    return open && open.networks.has(address) ? open.token : null;
  }

  /** The open doors, for `status`. */
  views(): OpenDoorView[] {
    return [...this.#open.values()].map((open) => ({ ...open.view, openTo: [...open.view.openTo], caveats: [...open.view.caveats] }));
  }
}

/** A kept door grant still fits: not revoked, and minted with exactly the configured caveats (after its kind). */
function reusable(token: string, caveats: readonly string[], deps: OpenDoorsDeps): boolean {
  try {
    const grant = inspectGrant(token);
    const lines = grant.caveats.slice(1, 1 + caveats.length);
    // After them only what the orchestrator adds to every grant it mints (a TLS mesh's `tls-ca`).
    const added = grant.caveats.slice(1 + caveats.length);
    return !deps.authority.isRevoked(grant.id) && grant.caveats[0] === 'kind client' && lines.length === caveats.length
      && lines.every((line, index) => line === caveats[index]) && added.every((line) => line.startsWith('tls-ca '));
  } catch {
    return false;
  }
}

/** Revoke a door's kept grant (closed, or its caveats changed) and remove its file. */
async function closeKept(door: DoorName, token: string, file: string, deps: OpenDoorsDeps): Promise<void> {
  try {
    const { id } = inspectGrant(token);
    if (!deps.authority.isRevoked(id)) {
      await deps.issuer.revoke(id).catch((error: unknown) => {
        // A grant the store does not know (a data folder copied from elsewhere) is refused anyway.
        if (!(error instanceof MeshError && error.code === 'NOT_FOUND')) throw error;
      });
      deps.audit.record({ event: 'door:closed', grantId: id, detail: `the ${door} door's grant for requests without credentials is revoked` });
    }
  } catch (error) {
    if (!(error instanceof MeshError && error.code === 'GRANT_INVALID')) throw error;
  }
  rmSync(file, { force: true });
}
