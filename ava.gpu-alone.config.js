// GPU tests that take most of the GPU's memory for themselves: they run after the
// rest of the GPU suite, one file at a time, so that no other test starves meanwhile.
import gpu from './ava.gpu.config.js';

export default { ...gpu, files: ['test/gpu/alone/**/*.test.ts'], concurrency: 1 };
