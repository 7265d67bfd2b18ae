import type { Logger } from 'pino';
import type { Clock } from '../protocol/clock.js';
import type { GovernanceConfigInput } from '../protocol/engines/process-settings.js';
import type { AgentLinkOptions } from './link/link.js';
import type { HostConfig } from './models/host-config.js';
import type { FoundTool, MissingTool } from './video/find-tool.js';

/** How an agent is started (`gpumesh agent`, `gpumesh up`'s own agent, the tests). */
export interface AgentOptions {
  /**
   * The orchestrator's base URL, or several: orchestrators sharing one store, one active and the others standbys.
   * The link goes round them until one welcomes it; model pulls and large outputs go over HTTP to the one linked.
   */
  url: string | readonly string[];
  /** Link to an orchestrator in this process instead of dialling `url` (`gpumesh up`): see AgentLinkOptions.connect. */
  connect?: AgentLinkOptions['connect'];
  /** An agent grant (`gpumesh grant create --agent --host <id>`). On a TLS mesh it names the CA to pin (`tls-ca`). */
  grant: string;
  /** A CA fingerprint to pin besides the grant's, for a grant that names none (`--tls-ca-fingerprint`). */
  tlsCaFingerprint?: string;
  /** This host's id; must match the grant's host. */
  host: string;
  /** Routing classes this host serves (`image`, `video`, …). */
  classes: string[];
  /** Model cache and other state. */
  dataDir: string;
  /** Memory budget for models on the CPU (MB); default: half the RAM, at most 8 GiB. */
  cpuBudgetMB?: number;
  /** Batches run at once. Default 1 (one device, one forward pass at a time). */
  concurrency?: number;
  /** Unload a model idle this long; its engine process ends with the last one (scale to zero). Default 5 min. */
  idleUnloadMs?: number;
  nvidiaSmi?: string;
  /** How engine processes are governed: cgroups (auto, v2, v1, off), the ONNX worker's limits, ceilings per engine. */
  governance?: GovernanceConfigInput;
  /** The engines this agent runs (and lists in its hello), by registered name. Default: every registered engine. */
  engines?: string[];
  log?: Logger;
  /**
   * How long a batch's `started` and `progress` reports are held back, so a batch that ends sooner sends only its
   * results (see BatchReports). Default 10 ms; 0 sends each at once.
   */
  reportDelayMs?: number;
  /** The orchestrator sent `drain` (an admin drained this host); the agent is draining. Default: leave when drained. */
  onDrainRequested?: () => void;
  /** The ffmpeg clips are encoded with, or why there is none. Default: looked up at start (findFfmpeg). */
  ffmpeg?: FoundTool | MissingTool;
  /**
   * Who engine processes run as when the agent runs as root (`--engine-user`): default `nobody`; `root` keeps them
   * root. An agent running as an ordinary user runs them as itself. See resolveEngineUser.
   */
  engineUser?: string;
  /**
   * What this host's owner lets the mesh run here (`--config host.yaml`; `gpumesh up` gives its agent mesh.yaml's
   * models): commands, servers and the other host settings come only from it. Default: none (data models only).
   */
  hostConfig?: HostConfig;
  /** Time for the heartbeat, the idle sweep, the link's redials and a leave's limit (a fake in tests). Default: real time. */
  clock?: Clock;
}
