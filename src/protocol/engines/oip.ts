import { z } from 'zod';
import { settingsNamed, type EngineDescriptor } from './descriptor.js';
import { launchSettings, SERVER_HOST_SETTINGS, urlOrCommand } from './server-settings.js';

/**
 * `settings` of a model served by an Open Inference Protocol v2 server
 * (Triton, KServe). The options type is the configuration reference: every
 * field says its default.
 */
export const OipSettings = z.strictObject({
  /** The server's base URL (`http://127.0.0.1:8000`). Without it the agent starts one from `command`. */
  url: z.url().optional(),
  /** A server the agent starts (`command: tritonserver --http-port ${PORT} …`); readiness by default: `GET /v2/health/ready` answers 2xx. */
  ...launchSettings({ http: '/v2/health/ready' }),
  /** The model's name on the server. Default: the gpumesh model's name. */
  model: z.string().min(1).optional(),
  /** A model version. Default: the server's choice. */
  version: z.string().min(1).optional(),
  /** The input that takes each job's `x`. Default: the model's only input. */
  input: z.string().min(1).optional(),
  /** The output returned as the job's `y`. Default: the model's first output. */
  output: z.string().min(1).optional(),
  /**
   * Raw tensor bytes (Triton's binary tensor data extension) or JSON. `auto` (default): binary when the
   * server lists `binary_tensor_data` among its extensions.
   */
  binary: z.enum(['auto', 'always', 'never']).default('auto'),
  /**
   * Most jobs in one request when the model batches (its input's first dimension is −1). Default: the
   * server's `max_batch_size` (Triton's model configuration), else the whole batch; 1 sends one request per job.
   */
  maxBatchSize: z.int().positive().optional(),
  /** Limit for one HTTP request. Default 60 s. */
  requestTimeoutMs: z.int().positive().default(60_000),
  /** Attempts after the first when the server answers 429/503 or drops the connection. Default 2. */
  retries: z.int().min(0).max(10).default(2),
}).superRefine(urlOrCommand);
export type OipSettings = z.infer<typeof OipSettings>;

/** Tensor models on an Open Inference Protocol v2 server (Triton, KServe), fronted or started by the agent. Its jobs carry numbers only. */
export const oipDescriptor: EngineDescriptor<typeof OipSettings> = {
  name: 'oip', settings: OipSettings, server: true, needsFile: false, controlMarkup: [],
  hostSettingsOf: settingsNamed(SERVER_HOST_SETTINGS), hostDeclared: true,
};
