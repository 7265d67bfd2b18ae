import { createRequire } from 'node:module';

type Koffi = typeof import('koffi');
let getCreation: ((pid: number) => string | null) | null = null;

/**
 * When a Windows process was created (its creation FILETIME, as a decimal string), by kernel32's GetProcessTimes
 * through koffi; null when there is no such process. With the pid, it names the process for good: Windows reuses pids,
 * and under Wine every process may even show the same one.
 */
export function windowsCreationTime(pid: number): string | null {
  getCreation ??= bind(createRequire(import.meta.url)('koffi') as Koffi);
  return getCreation(pid);
}

function bind(koffi: Koffi): (pid: number) => string | null {
  const kernel32 = koffi.load('kernel32.dll');
  koffi.pointer('PROCESS_HANDLE', koffi.opaque());
  const OpenProcess = kernel32.func('PROCESS_HANDLE __stdcall OpenProcess(uint32_t access, bool inherit, uint32_t pid)');
  const CloseHandle = kernel32.func('bool __stdcall CloseHandle(PROCESS_HANDLE handle)');
  const GetProcessTimes = kernel32.func('bool __stdcall GetProcessTimes(PROCESS_HANDLE process, _Out_ uint64_t *creation, _Out_ uint64_t *exit, _Out_ uint64_t *kernel, _Out_ uint64_t *user)');
  const PROCESS_QUERY_LIMITED_INFORMATION = 0x1000;
  return (pid) => {
    const handle = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, false, pid);
    if (!handle) return null;
    try {
      const creation = [0n];
      if (!GetProcessTimes(handle, creation, [0n], [0n], [0n])) return null;
      return String(creation[0]);
    } finally {
      CloseHandle(handle);
    }
  };
}
