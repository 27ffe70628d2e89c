/** `gpuring doctor`: what this machine offers gpuring, and what to fix. */
import { readdirSync, readFileSync, statfsSync } from 'node:fs';
import { native, type CudaInfo } from '../native.js';
import { bytes, type Output } from './output.js';

interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

function shmCheck(): Check[] {
  try {
    const s = statfsSync('/dev/shm');
    const free = s.bavail * s.bsize;
    const total = s.blocks * s.bsize;
    const segments = readdirSync('/dev/shm').filter((f) => f.startsWith('gpuring.'));
    return [
      { name: '/dev/shm', ok: free >= 256 << 20, detail: `${bytes(free)} free of ${bytes(total)}${free < 256 << 20 ? ' (small: enlarge it, e.g. docker run --shm-size=4g)' : ''}` },
      { name: 'gpuring objects', ok: true, detail: segments.length ? `${segments.length} in /dev/shm: ${segments.slice(0, 8).join(', ')}${segments.length > 8 ? ', ...' : ''}` : 'none' },
    ];
  } catch (error) {
    return [{ name: '/dev/shm', ok: false, detail: `not usable: ${(error as Error).message}` }];
  }
}

function openFilesCheck(): Check {
  const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
  const soft = line?.split(/\s{2,}/)[1] ?? 'unknown';
  return { name: 'open files', ok: soft === 'unlimited' || Number(soft) >= 1024, detail: `soft limit ${soft}` };
}

function cudaChecks(info: CudaInfo): Check[] {
  if (!info.available) return [{ name: 'CUDA driver', ok: true, detail: `${info.error}; host-memory rings work, device memory needs an NVIDIA driver` }];
  const v = info.driverVersion ?? 0;
  const checks: Check[] = [{ name: 'CUDA driver', ok: true, detail: `libcuda.so.1, CUDA ${Math.floor(v / 1000)}.${(v % 1000) / 10}, ${info.devices.length} device(s)` }];
  for (const d of info.devices) {
    checks.push({ name: `GPU ${d.ordinal}`, ok: true, detail: `${d.name}, ${d.uuid}, ${bytes(d.freeBytes)} free of ${bytes(d.totalBytes)}` });
    checks.push({ name: `GPU ${d.ordinal} IPC`, ok: d.ipc.ok, detail: d.ipc.ok ? 'device memory can be exported' : `not available: ${d.ipc.reason}` });
  }
  if (info.devices.length > 1)
    checks.push({ name: 'peer access', ok: true, detail: info.devices.map((d) => `${d.ordinal}: ${d.peerAccess.map((p) => (p ? 'y' : '-')).join('')}`).join('  ') });
  return checks;
}

function addonCheck(): Check[] {
  try {
    const a = native();
    return [{ name: 'native addon', ok: true, detail: `loaded; wire format ${a.versionMajor}.${a.versionMinor}, layout ${a.layoutHash}` }, ...cudaChecks(a.cudaInfo())];
  } catch (error) {
    return [{ name: 'native addon', ok: false, detail: (error as Error).message }];
  }
}

export function doctorCommand(out: Output): boolean {
  const checks = [...shmCheck(), openFilesCheck(), ...addonCheck()];
  const ok = checks.every((c) => c.ok);
  out.result({ ok, checks }, () => checks.map((c) => `${c.ok ? 'ok  ' : 'FAIL'}  ${c.name}: ${c.detail}`).join('\n'));
  return ok;
}
