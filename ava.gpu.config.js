// The GPU suite: test/gpu only. Run on a machine with an NVIDIA GPU (see
// DEVELOPERS.md); elsewhere every test there reports skipped with the reason.
export default {
  extensions: { ts: 'module' },
  nodeArguments: ['--import=tsx', '--expose-gc'], // gc(): pinned-pool reuse is tested
  workerThreads: false,
  files: ['test/gpu/**/*.test.ts', '!test/gpu/alone/**'], // alone/: see ava.gpu-alone.config.js
  timeout: '5m',
};
