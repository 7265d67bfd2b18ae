import type { OrchestratorMessage } from '../../protocol/index.js';
import type { BatchRunner } from '../batches/batch-runner.js';
import type { HostPolicy } from '../host-policy/host-policy.js';
import type { LoadRequests } from '../models/load-requests.js';
import type { AgentRelays } from '../relay/relays.js';
import type { Session } from './session.js';

/** The parts of the agent the orchestrator's messages are for. */
export interface InboxParts {
  policy: Pick<HostPolicy, 'away' | 'refusal'>;
  batches: Pick<BatchRunner, 'run' | 'cancel'>;
  session: Pick<Session, 'report' | 'forget' | 'acknowledged'>;
  loads: Pick<LoadRequests, 'load' | 'unload'>;
  relays: Pick<AgentRelays, 'open' | 'receive'>;
  /** The orchestrator asked the host to drain and leave (`gpumesh agent drain`, an admin's request). */
  drainRequested(): void;
}

/** Each message from the orchestrator, to the part it is for. The welcome is the link's own (AgentLink). */
export function deliver(message: OrchestratorMessage, to: InboxParts): void {
  switch (message.type) {
    case 'run': {
      // Sent before the orchestrator heard that this host takes no work now: handed back at once, for another host.
      const away = to.policy.away;
      if (away) {
        const error = to.policy.refusal(away);
        for (const job of message.jobs) to.session.report({ type: 'failed', jobId: job.id, batchId: message.batchId, retryable: true, error: { code: error.code, message: error.message } });
        return;
      }
      void to.batches.run(message);
      return;
    }
    case 'cancel':
      to.batches.cancel(message.jobId);
      to.session.forget(message.jobId);
      return;
    case 'ack':
      to.session.acknowledged(message.jobIds);
      return;
    case 'load':
      void to.loads.load(message.model, message.hold);
      return;
    case 'unload':
      void to.loads.unload(message.model);
      return;
    case 'drain':
      to.drainRequested();
      return;
    case 'relay-open':
      return to.relays.open(message);
    case 'relay-data':
    case 'relay-credit':
    case 'relay-close':
      return to.relays.receive(message);
    case 'welcome':
      return;
    default:
      return unhandled(message);
  }
}

/** Compile-time exhaustiveness: a new orchestrator message without a case here does not build. */
function unhandled(message: never): void {
  throw new Error(`unhandled orchestrator message ${JSON.stringify(message)}`);
}
