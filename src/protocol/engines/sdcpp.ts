import { z } from 'zod';
import { settingsNamed, type EngineDescriptor } from './descriptor.js';
import { SDCPP_MARKUP } from './markup.js';
import { BackoffSettings, HttpEngineSettings, launchSettings, SERVER_HOST_SETTINGS, urlOrCommand } from './server-settings.js';

/**
 * A model served by stable-diffusion.cpp's `sd-server`: the manifest's `settings`, with defaults.
 * Documented for operators in docs/operations.md.
 */
export const SdcppSettings = z.object({
  ...HttpEngineSettings,
  /**
   * A server the agent starts (`command: sd-server --model ${MODEL_PATH} --listen-port ${PORT}`, …). sd-server
   * listens once its model is loaded; readiness by default: `GET /sdcpp/v1/capabilities` answers 2xx (a server
   * without the native API needs `readiness: { http: /sdapi/v1/options }` or a log line).
   */
  ...launchSettings({ http: '/sdcpp/v1/capabilities' }),
  /**
   * Which of the server's APIs to use. `auto` (default): the native async API
   * (`/sdcpp/v1/…`) when `GET /sdcpp/v1/capabilities` answers, else the A1111-style
   * `POST /sdapi/v1/txt2img` (older servers).
   */
  api: z.enum(['auto', 'native', 'sdapi']).default('auto'),
  /** Jobs of one batch submitted at once (native API), at most the server's `limits.max_queue_size`. The server still makes one image at a time. Default 4. */
  maxInFlight: z.int().min(1).max(64).default(4),
  /** Waits between polls of a job: 100 ms growing by 1.5 to 1 s, and back to 100 ms whenever the job moves. */
  poll: BackoffSettings(100, 1000, 1.5),
  /** A poll that fails to connect is tried again this many times before the job fails (polls are safe to repeat; submissions are not). Default 2. */
  pollRetries: z.int().min(0).max(10).default(2),
  /**
   * Native request fields added to every job's request (`sample_params.sample_method`,
   * `sample_params.guidance.txt_cfg`, `lora`, …); the job's own prompt, size, seed and steps win.
   * With the A1111 API they ride in the prompt as `<sd_cpp_extra_args>`.
   */
  extra: z.record(z.string(), z.unknown()).default({}),
}).superRefine(urlOrCommand);
export type SdcppSettings = z.output<typeof SdcppSettings>;

/** stable-diffusion.cpp's sd-server, fronted or started by the agent. */
export const sdcppDescriptor: EngineDescriptor<typeof SdcppSettings> = {
  name: 'sdcpp', settings: SdcppSettings, server: true, needsFile: false, controlMarkup: SDCPP_MARKUP,
  hostSettingsOf: settingsNamed(SERVER_HOST_SETTINGS), hostDeclared: true,
};
