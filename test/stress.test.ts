// 2 producer processes x 2 consumer processes x 100,000 frames each: every
// frame is delivered exactly once and its contents check out.
import test from 'ava';
import { child, exitOf, nextLine, withRing } from './helpers/ring.js';

const FRAMES = Number(process.env.GPURING_STRESS_FRAMES ?? 100_000);

test(`2 producers x 2 consumers x ${FRAMES} frames: each delivered exactly once, contents verified`, async (t) => {
  t.timeout(600_000);
  await withRing('stress', { slots: 1024 }, async (_ring, name) => {
    const consumers = [child('stress-consume', name), child('stress-consume', name)];
    const reports = consumers.map((c) => nextLine<{ seen: number[]; bad: number }>(c));
    const started = performance.now();
    const producers = [child('stress-produce', name, 1, FRAMES), child('stress-produce', name, 2, FRAMES)];
    for (const p of producers) t.deepEqual(await exitOf(p), { code: 0, signal: null });
    const seconds = (performance.now() - started) / 1000;
    // Producers drained: every frame was consumed and released. Stop the consumers.
    for (const c of consumers) c.send('stop');
    const [a, b] = await Promise.all(reports);
    const seen = [...a!.seen, ...b!.seen];
    t.is(a!.bad + b!.bad, 0, 'every frame carried the contents its producer wrote');
    t.is(seen.length, 2 * FRAMES, 'as many deliveries as frames');
    t.is(new Set(seen).size, 2 * FRAMES, 'no frame delivered twice');
    for (const p of [1, 2]) t.true(seen.includes(p * 1_000_000 + FRAMES - 1), `producer ${p}'s last frame arrived`);
    t.true(a!.seen.length > 0 && b!.seen.length > 0, 'both consumers took frames');
    t.log(`${2 * FRAMES} frames in ${seconds.toFixed(1)} s (${Math.round((2 * FRAMES) / seconds)} frames/s, ${a!.seen.length} + ${b!.seen.length} per consumer)`);
    for (const c of consumers) t.deepEqual(await exitOf(c), { code: 0, signal: null });
  });
});
