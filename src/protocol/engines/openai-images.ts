import { z } from 'zod';
import { settingsNamed, type EngineDescriptor } from './descriptor.js';
import { SDCPP_MARKUP } from './markup.js';
import { HttpEngineSettings, launchSettings, SERVER_HOST_SETTINGS, urlOrCommand } from './server-settings.js';

/**
 * A model served by an OpenAI-compatible image server (LiteLLM, LocalAI, sd-server's `/v1` API,
 * OpenAI itself): the manifest's `settings`, with defaults. Documented in docs/operations.md.
 */
export const OpenAiImagesSettings = z.object({
  ...HttpEngineSettings,
  /** A server the agent starts (`command`, …); readiness by default: `GET /v1/models` answers 2xx. */
  ...launchSettings({ http: '/v1/models' }),
  /** The model name the server knows (`model` in each request); left out when not set. */
  model: z.string().min(1).optional(),
  /** The name of an environment variable on the agent's host that holds the API key, sent as `Authorization: Bearer`. */
  apiKeyEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be the name of an environment variable').optional(),
  /** A key written into the manifest would be readable by everyone who can read manifests; refused. */
  apiKey: z.never({ error: 'do not put a key in the manifest: put it in an environment variable on the agent host and name that in settings.apiKeyEnv' }).optional(),
  /** The generations route under `url`. Default `/v1/images/generations`. */
  path: z.string().startsWith('/').default('/v1/images/generations'),
  /** Send `response_format: "b64_json"` (default). gpt-image models refuse the field and always answer base64: set false for them. */
  sendResponseFormat: z.boolean().default(true),
  /**
   * The OpenAI request has no seed, steps or negative prompt. `sdcpp` carries them in the prompt as
   * sd-server's `<sd_cpp_extra_args>` block; `none` (default) leaves them out.
   */
  promptExtras: z.enum(['none', 'sdcpp']).default('none'),
  /** Requests of one batch in flight at once (one per job). Default 1. */
  maxInFlight: z.int().min(1).max(64).default(1),
  /** Fields added to every request (`quality`, `style`, …); the job's prompt and size win. */
  extra: z.record(z.string(), z.unknown()).default({}),
}).superRefine(urlOrCommand);
export type OpenAiImagesSettings = z.output<typeof OpenAiImagesSettings>;

/** Any server with OpenAI's images API, fronted or started by the agent. sd.cpp's markup is refused whatever `promptExtras` says: the server behind the API may be sd-server, which reads it on this route too. */
export const openAiImagesDescriptor: EngineDescriptor<typeof OpenAiImagesSettings> = {
  name: 'openai-images', settings: OpenAiImagesSettings, server: true, needsFile: false, controlMarkup: SDCPP_MARKUP,
  // Which of the host's variables is sent to the server as a key is the host's to say, as is the server.
  hostSettingsOf: settingsNamed([...SERVER_HOST_SETTINGS, 'apiKeyEnv']), hostDeclared: true,
};
