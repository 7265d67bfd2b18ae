import { createRequire } from 'node:module';

/**
 * Windows Job Objects through kernel32, by koffi (an FFI with prebuilt binaries from npm): the way Windows lets a
 * process govern a tree of others — a memory limit for the whole tree, its list of processes, and, most of all,
 * kill-on-close: when the last handle to the job closes, Windows ends every process in it. The agent holds that handle,
 * so its engine trees die with it however it dies (a crash, Task Manager, SIGKILL under Wine), never left holding
 * their port and their VRAM. Loaded only on Windows; nothing here runs anywhere else.
 */

/** What the agent asks Windows for, kept so it can be reported (Wine accepts but does not enforce memory limits). */
export interface JobLimits {
  /** The whole tree's committed memory, in bytes (JOB_OBJECT_LIMIT_JOB_MEMORY); null: none. */
  jobMemoryBytes: number | null;
  /** Processes the tree may hold at once (JOB_OBJECT_LIMIT_ACTIVE_PROCESS); null: none. */
  activeProcesses: number | null;
}

export interface JobObject {
  readonly limits: JobLimits;
  /** Put a process in the job (its later children join it by themselves). */
  assign(pid: number): void;
  /** The processes in the job now. */
  processIds(): number[];
  /** The working sets of the job's processes together, in bytes (null when Windows would not say). */
  memoryBytes(): number | null;
  /** End every process in the job with this exit code. */
  terminate(exitCode: number): void;
  /** Close the agent's handle: with kill-on-close, whatever still runs in the job ends. */
  close(): void;
}

const JOB_OBJECT_LIMIT_ACTIVE_PROCESS = 0x8;
const JOB_OBJECT_LIMIT_JOB_MEMORY = 0x200;
const JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000;
const JobObjectBasicProcessIdList = 3;
const JobObjectExtendedLimitInformation = 9;
const PROCESS_TERMINATE = 0x0001;
const PROCESS_SET_QUOTA = 0x0100;
const PROCESS_QUERY_LIMITED_INFORMATION = 0x1000;
const PROCESS_VM_READ = 0x0010;
/** How many process ids one query returns; a job with more says how many it has, and is asked again with room. */
const LISTED = 256;

type Koffi = typeof import('koffi');
type Api = ReturnType<typeof bind>;
let api: Api | null = null;

/** kernel32's job functions, bound once. */
function bind(koffi: Koffi) {
  const kernel32 = koffi.load('kernel32.dll');
  koffi.pointer('HANDLE', koffi.opaque());
  const basic = koffi.struct('JOBOBJECT_BASIC_LIMIT_INFORMATION', {
    PerProcessUserTimeLimit: 'int64', PerJobUserTimeLimit: 'int64', LimitFlags: 'uint32', MinimumWorkingSetSize: 'size_t',
    MaximumWorkingSetSize: 'size_t', ActiveProcessLimit: 'uint32', Affinity: 'size_t', PriorityClass: 'uint32', SchedulingClass: 'uint32',
  });
  const io = koffi.struct('IO_COUNTERS', {
    ReadOperationCount: 'uint64', WriteOperationCount: 'uint64', OtherOperationCount: 'uint64',
    ReadTransferCount: 'uint64', WriteTransferCount: 'uint64', OtherTransferCount: 'uint64',
  });
  const extended = koffi.struct('JOBOBJECT_EXTENDED_LIMIT_INFORMATION', {
    BasicLimitInformation: basic, IoInfo: io, ProcessMemoryLimit: 'size_t', JobMemoryLimit: 'size_t', PeakProcessMemoryUsed: 'size_t', PeakJobMemoryUsed: 'size_t',
  });
  const idList = koffi.struct('JOBOBJECT_BASIC_PROCESS_ID_LIST', {
    NumberOfAssignedProcesses: 'uint32', NumberOfProcessIdsInList: 'uint32', ProcessIdList: koffi.array('size_t', LISTED),
  });
  const counters = koffi.struct('PROCESS_MEMORY_COUNTERS', {
    cb: 'uint32', PageFaultCount: 'uint32', PeakWorkingSetSize: 'size_t', WorkingSetSize: 'size_t', QuotaPeakPagedPoolUsage: 'size_t',
    QuotaPagedPoolUsage: 'size_t', QuotaPeakNonPagedPoolUsage: 'size_t', QuotaNonPagedPoolUsage: 'size_t', PagefileUsage: 'size_t', PeakPagefileUsage: 'size_t',
  });
  return {
    sizes: { extended: koffi.sizeof(extended), idList: koffi.sizeof(idList), counters: koffi.sizeof(counters) },
    CreateJobObjectW: kernel32.func('HANDLE __stdcall CreateJobObjectW(void *attributes, const char16_t *name)'),
    SetInformationJobObject: kernel32.func('bool __stdcall SetInformationJobObject(HANDLE job, int infoClass, _In_ JOBOBJECT_EXTENDED_LIMIT_INFORMATION *info, uint32_t length)'),
    QueryProcessIds: kernel32.func('bool __stdcall QueryInformationJobObject(HANDLE job, int infoClass, _Out_ JOBOBJECT_BASIC_PROCESS_ID_LIST *info, uint32_t length, _Out_ uint32_t *returned)'),
    AssignProcessToJobObject: kernel32.func('bool __stdcall AssignProcessToJobObject(HANDLE job, HANDLE process)'),
    TerminateJobObject: kernel32.func('bool __stdcall TerminateJobObject(HANDLE job, uint32_t exitCode)'),
    OpenProcess: kernel32.func('HANDLE __stdcall OpenProcess(uint32_t access, bool inherit, uint32_t pid)'),
    CloseHandle: kernel32.func('bool __stdcall CloseHandle(HANDLE handle)'),
    GetLastError: kernel32.func('uint32_t __stdcall GetLastError()'),
    // psapi's, exported by kernel32 under a K32 prefix since Windows 7.
    GetProcessMemoryInfo: kernel32.func('bool __stdcall K32GetProcessMemoryInfo(HANDLE process, _Out_ PROCESS_MEMORY_COUNTERS *counters, uint32_t size)'),
  };
}

function kernel32(): Api {
  if (process.platform !== 'win32') throw new Error('Job Objects are a Windows feature');
  // Loaded on first use, on Windows only: koffi's binary for this platform comes with the npm package.
  api ??= bind(createRequire(import.meta.url)('koffi') as Koffi);
  return api;
}

/**
 * A new job for one engine process tree: kill-on-close always, the tree's memory and process count limited where
 * asked. Throws, naming the call and Windows' error code, when Windows refuses.
 */
export function createJobObject(limits: JobLimits): JobObject {
  const k = kernel32();
  const handle = k.CreateJobObjectW(null, null);
  if (!handle) throw new Error(`CreateJobObjectW failed (error ${k.GetLastError()})`);
  let flags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
  if (limits.jobMemoryBytes !== null) flags |= JOB_OBJECT_LIMIT_JOB_MEMORY;
  if (limits.activeProcesses !== null) flags |= JOB_OBJECT_LIMIT_ACTIVE_PROCESS;
  const info = {
    BasicLimitInformation: {
      PerProcessUserTimeLimit: 0, PerJobUserTimeLimit: 0, LimitFlags: flags, MinimumWorkingSetSize: 0, MaximumWorkingSetSize: 0,
      ActiveProcessLimit: limits.activeProcesses ?? 0, Affinity: 0, PriorityClass: 0, SchedulingClass: 0,
    },
    IoInfo: { ReadOperationCount: 0, WriteOperationCount: 0, OtherOperationCount: 0, ReadTransferCount: 0, WriteTransferCount: 0, OtherTransferCount: 0 },
    ProcessMemoryLimit: 0, JobMemoryLimit: limits.jobMemoryBytes ?? 0, PeakProcessMemoryUsed: 0, PeakJobMemoryUsed: 0,
  };
  if (!k.SetInformationJobObject(handle, JobObjectExtendedLimitInformation, info, k.sizes.extended)) {
    const code = k.GetLastError();
    k.CloseHandle(handle);
    throw new Error(`SetInformationJobObject failed (error ${code})`);
  }
  let closed = false;
  const processIds = (): number[] => {
    if (closed) return [];
    const list = {} as { NumberOfProcessIdsInList?: number; ProcessIdList?: ArrayLike<number | bigint> };
    if (!k.QueryProcessIds(handle, JobObjectBasicProcessIdList, list, k.sizes.idList, [0])) return [];
    return Array.from({ length: list.NumberOfProcessIdsInList ?? 0 }, (_, index) => Number(list.ProcessIdList![index]));
  };
  return {
    limits,
    assign(pid) {
      const process = k.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, false, pid);
      if (!process) throw new Error(`OpenProcess(${pid}) failed (error ${k.GetLastError()})`);
      try {
        if (!k.AssignProcessToJobObject(handle, process)) throw new Error(`AssignProcessToJobObject(${pid}) failed (error ${k.GetLastError()})`);
      } finally {
        k.CloseHandle(process);
      }
    },
    processIds,
    memoryBytes() {
      let total = 0;
      for (const pid of processIds()) {
        const process = k.OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_VM_READ, false, pid);
        if (!process) continue;
        const counters = { cb: k.sizes.counters } as { cb: number; WorkingSetSize?: number | bigint };
        if (k.GetProcessMemoryInfo(process, counters, k.sizes.counters)) total += Number(counters.WorkingSetSize ?? 0);
        k.CloseHandle(process);
      }
      return total > 0 ? total : null;
    },
    terminate(exitCode) {
      if (!closed) k.TerminateJobObject(handle, exitCode);
    },
    close() {
      if (closed) return;
      closed = true;
      k.CloseHandle(handle);
    },
  };
}
