/**
 * The timer of a wait with a timeout in ms (Infinity: none). setTimeout fires
 * at once past 2^31 - 1 ms, so a wait of over 24 days is a wait without
 * limit: no timer, and `clearTimeout(undefined)` is harmless.
 */
export function waitTimer(ms: number, late: () => void): ReturnType<typeof setTimeout> | undefined {
  return ms <= 0x7fffffff ? setTimeout(late, Math.max(ms, 0)) : undefined;
}
