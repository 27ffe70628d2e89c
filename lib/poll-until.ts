import { GpuringError } from './errors.js';

/**
 * Checks `done` every `intervalMs` until it holds. For start-up waits on state
 * that nothing rings a doorbell for (a ring appearing, subscribers joining):
 * a check is a stat or a load, cheap enough to keep such waits short.
 * Rejects with ABORTED when `signal` aborts and with `late()` once `timeout`
 * ms have passed.
 */
export async function pollUntil(
  done: () => boolean,
  { timeout, signal }: { timeout: number; signal?: AbortSignal | undefined },
  intervalMs: number,
  what: string,
  late: () => GpuringError,
): Promise<void> {
  const deadline = performance.now() + timeout;
  for (;;) {
    if (signal?.aborted) throw new GpuringError('ABORTED', `the wait for ${what} was aborted`, { cause: signal.reason });
    if (done()) return;
    if (performance.now() >= deadline) throw late();
    await new Promise((resolve) => setTimeout(resolve, Math.min(intervalMs, Math.max(0, deadline - performance.now()))));
  }
}
