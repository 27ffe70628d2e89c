"""GPU work still running when a test publishes: the GPU tests and their
children queue it so that frames carry the producer's event (SPEC.md §9a)."""
import cupy


def stall(ms):
    """Queues a kernel that spins ``ms`` ms on the current stream: work still
    running when the next call publishes, however fast the GPU."""
    kernel = cupy.RawKernel(r'''extern "C" __global__ void stall(long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) {}
    }''', "stall")
    kernel((1,), (1,), (cupy.int64(ms * cupy.cuda.Device().attributes["ClockRate"]),))


def load_stall_and_fill():
    """Loads the stall kernel and CuPy's float32 fill now: the first launch of a
    kernel loads its module, which waits for the device to go idle, so a first
    fill queued behind a stall would wait the stall out and leave nothing queued."""
    stall(0)
    cupy.empty(1, dtype=cupy.float32).fill(0.5)
    cupy.cuda.Device().synchronize()
