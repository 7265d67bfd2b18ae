import type { InferenceSession } from 'onnxruntime-node';
import type { Device } from '../../../protocol/index.js';

/**
 * The execution providers onnxruntime-node ships, by platform: CUDA in the Linux x64 build (its libraries come with
 * the NVIDIA driver and toolkit), DirectML in the Windows builds (any DirectX 12 GPU: NVIDIA, AMD, Intel), CoreML in
 * the macOS build (the Apple GPU and Neural Engine, for a Mac's one device, which the agent calls its CPU). Every
 * session lists the CPU after its accelerator, so an operator the accelerator lacks runs there, and a session the
 * accelerator refuses outright is made again on the CPU alone (worker-core.ts).
 */
export type OnnxProvider = 'cpu' | 'cuda' | 'dml' | 'coreml';

/** The provider a model on `device` is loaded with on `platform`. */
export function providerFor(device: Pick<Device, 'kind'>, platform: NodeJS.Platform): OnnxProvider {
  if (device.kind === 'gpu') return platform === 'win32' ? 'dml' : 'cuda';
  return platform === 'darwin' ? 'coreml' : 'cpu';
}

/** A provider's entry in a session's `executionProviders`, then the CPU's. */
export function executionProviders(provider: OnnxProvider, deviceIndex: number): InferenceSession.ExecutionProviderConfig[] {
  switch (provider) {
    case 'cpu': return ['cpu'];
    case 'cuda': return [{ name: 'cuda', deviceId: deviceIndex }, 'cpu'];
    case 'dml': return [{ name: 'dml', deviceId: deviceIndex }, 'cpu'];
    case 'coreml': return [{ name: 'coreml' }, 'cpu'];
  }
}

/** Whether the provider's memory is the GPU's (read per process from nvidia-smi where the driver says it) or the RSS. */
export const onGpu = (provider: OnnxProvider): boolean => provider === 'cuda' || provider === 'dml';
