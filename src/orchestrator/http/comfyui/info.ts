import { freemem, totalmem } from 'node:os';
import { comboChoices, familyOf, type NodeCatalogue, type NodeClassInfo } from '../../../protocol/index.js';
import type { VerifiedGrant } from '../../auth/index.js';
import type { HostSession } from '../../routing/index.js';
import type { ComfyDoorDeps } from './routes.js';

const MiB = 1024 * 1024;

/** The hosts' catalogues of the workflow models the grant may use, as they reported them. */
function catalogues(grant: VerifiedGrant, hosts: Iterable<HostSession>): NodeCatalogue[] {
  const found: NodeCatalogue[] = [];
  for (const host of hosts) {
    for (const [model, catalogue] of host.catalogues) {
      if (catalogue && (!grant.models || grant.models.includes(familyOf(model)))) found.push(catalogue.nodes);
    }
  }
  return found;
}

/** A class's combo inputs with the choices of another host's same class added (a checkpoint only one host has). */
function withChoicesOf(into: NodeClassInfo, other: NodeClassInfo): NodeClassInfo {
  const merged = structuredClone(into);
  for (const group of ['required', 'optional'] as const) {
    for (const [input, spec] of Object.entries(merged.input[group] ?? {})) {
      const mine = comboChoices(spec);
      const theirs = comboChoices(other.input[group]?.[input]);
      if (!mine || !theirs) continue;
      const union = [...new Set([...mine, ...theirs])];
      if (Array.isArray(spec[0])) spec[0] = union;
      else if (spec[1]) spec[1].options = union;
    }
  }
  return merged;
}

/**
 * `GET /object_info`: what the mesh's ComfyUIs offer together — every node class some host has, each combo input with
 * the choices of every host (a model on one host is one the mesh can run: routing sends the prompt there). Built
 * from what agents reported and the orchestrator checked (protocol/workflows.ts), and served as JSON, never a page.
 */
export function objectInfo(grant: VerifiedGrant, deps: Pick<ComfyDoorDeps, 'hosts'>): Record<string, NodeClassInfo> {
  const union: Record<string, NodeClassInfo> = {};
  for (const catalogue of catalogues(grant, deps.hosts)) {
    for (const [name, info] of Object.entries(catalogue)) union[name] = Object.hasOwn(union, name) ? withChoicesOf(union[name]!, info) : info;
  }
  return union;
}

/**
 * `GET /system_stats` in ComfyUI's shape: the orchestrator's machine as the system, and as devices every device of
 * the hosts that run workflows (of every host while none does), `vram_free` what its budget has left.
 */
export function systemStats(deps: Pick<ComfyDoorDeps, 'hosts' | 'version'>): Record<string, unknown> {
  const hosts = [...deps.hosts];
  const serving = hosts.filter((host) => host.catalogues.size > 0);
  const devices = (serving.length > 0 ? serving : hosts).flatMap((host) => host.devices.map((device, index) => ({
    name: `${host.id} ${device.name}`, type: device.kind === 'gpu' ? 'cuda' : 'cpu', index,
    vram_total: Math.round(device.memoryTotalMB * MiB), vram_free: Math.round(Math.max(0, device.budgetMB - device.usedMB) * MiB),
    torch_vram_total: Math.round(device.usedMB * MiB), torch_vram_free: 0,
  })));
  return {
    system: {
      os: process.platform === 'win32' ? 'nt' : 'posix', ram_total: totalmem(), ram_free: freemem(), comfyui_version: `gpumesh ${deps.version}`,
      python_version: '', pytorch_version: '', embedded_python: false, argv: [],
    },
    devices,
  };
}
