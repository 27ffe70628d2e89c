// A C++ pipeline stage that hands rows x cols float32 tensors to its
// neighbours without copying them: each frame's tensor is allocated with the
// CUDA driver API, filled on the device by a kernel, and published as one
// fixed_size_list<float32>[cols] column with an interprocess event, so the
// consumer's reads are ordered after the kernel without a host-side wait.
//
//   tensor[k][r][c] = (r * cols + c) * 0.5 + k        (frame k, from 0)
//
// Usage: tensor_producer RING [ROWS [COLS [FRAMES [pool|vmm]]]]  (creates RING
// if it does not exist). With `pool`, tensors come from a stream-ordered pool
// made exportable (cuda-pool, SPEC.md §9b), the way a stage using
// cudaMallocAsync would allocate; with `vmm`, each is VMM memory of its own
// (cuda-vmm, §9d: 20 MiB chunks mapped side by side, as PyTorch's expandable
// segments are); else from cuMemAlloc. The tensor and its event belong to
// the frame until the consumer releases it; the release callback then frees
// them (gpuring/producer.h).
// Needs a GPU; the kernel is PTX, compiled by the driver at run time, so no
// CUDA toolkit is needed to build this.
#include <gpuring.h>
#include <gpuring/cuda.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace {

const char kFillPtx[] = R"(
.version 6.0
.target sm_50
.address_size 64
.visible .entry gpr_fill(.param .u64 out, .param .u64 n, .param .f32 scale, .param .f32 bias)
{
  .reg .pred %p;
  .reg .b32 %r<4>;
  .reg .b64 %rd<7>;
  .reg .f32 %f<5>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [n];
  ld.param.f32 %f1, [scale];
  ld.param.f32 %f2, [bias];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd3, %r1, %r2;
  cvt.u64.u32 %rd4, %r3;
  add.u64 %rd3, %rd3, %rd4;
  setp.ge.u64 %p, %rd3, %rd2;
  @%p bra DONE;
  cvt.rn.f32.u64 %f3, %rd3;
  fma.rn.f32 %f4, %f3, %f1, %f2;
  cvta.to.global.u64 %rd5, %rd1;
  shl.b64 %rd6, %rd3, 2;
  add.u64 %rd5, %rd5, %rd6;
  st.global.f32 [%rd5], %f4;
DONE:
  ret;
}
)";

[[noreturn]] void Fail(const char *what, const gpr_error &e) {
  std::fprintf(stderr, "tensor_producer: %s: %s: %s\n", what, gpr_code_name(e.code), e.message);
  std::exit(1);
}

void Check(const char *what, int rc, const gpr_error &e) {
  if (rc != 0) Fail(what, e);
}

// One published tensor: device memory and the event that orders reads after its fill.
struct Tensor {
  const gpr_cuda *cuda;
  CUdeviceptr ptr = 0;
  bool vmm = false;
  CUevent ready = nullptr;
  ~Tensor() {
    gpr_error err{};
    if (ready) cuda->cuEventDestroy(ready);
    if (ptr && vmm) gpr_cuda_vmm_free(cuda, ptr, &err);
    else if (ptr) cuda->cuMemFree(ptr);
  }
};

// Called by the producer once a consumer released the frame carrying `context`.
void OnRelease(void *context, uint64_t frame_id) {
  delete static_cast<Tensor *>(context);
  std::printf("{\"released\":%" PRIu64 "}\n", frame_id);
  std::fflush(stdout);
}

// The strings must outlive the description (they are copied at publish).
gpr_node_desc Node(const char *name, const char *format, uint32_t buffers, uint64_t length) {
  gpr_node_desc n{};
  n.name = name;
  n.name_length = static_cast<uint32_t>(std::strlen(name));
  n.format = format;
  n.format_length = static_cast<uint32_t>(std::strlen(format));
  n.dictionary = -1;
  n.buffer_count = buffers;
  n.length = length;
  return n;
}

struct Stage {
  const gpr_cuda *cuda = nullptr;
  CUfunction fill = nullptr;
  CUstream stream = nullptr;
  gpr_producer *producer = nullptr;
  CUmemoryPool pool = nullptr;  // null: cuMemAlloc (or VMM)
  bool vmm = false;
  uint32_t rows = 0, cols = 0;

  // A pool whose memory other processes can import (a file-descriptor handle
  // type), keeping freed memory for the next tensor.
  void MakeExportablePool() {
    gpr_error err{};
    CUmemPoolProps props{};
    props.allocType = 1;  // pinned device memory
    props.handleTypes = GPR_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = GPR_CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    Check("cuMemPoolCreate", gpr_cuda_check(cuda, cuda->cuMemPoolCreate(&pool, &props), "cuMemPoolCreate", &err), err);
    unsigned long long keep = ~0ull;
    Check("pool threshold", gpr_cuda_check(cuda, cuda->cuMemPoolSetAttribute(pool, GPR_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
                                           "cuMemPoolSetAttribute", &err), err);
  }

  // Allocates and fills frame k's tensor on `stream`, records its event.
  std::unique_ptr<Tensor> Make(uint64_t k, uint8_t event_handle[GPR_HANDLE_BYTES]) {
    gpr_error err{};
    auto t = std::make_unique<Tensor>();
    t->cuda = cuda;
    uint64_t n = uint64_t{rows} * cols;
    if (vmm) {
      Check("allocate", gpr_cuda_vmm_alloc(cuda, 0, n * 4, &t->ptr, &err), err);
      t->vmm = true;
    } else {
      CUresult rc = pool ? cuda->cuMemAllocFromPoolAsync(&t->ptr, n * 4, pool, stream) : cuda->cuMemAlloc(&t->ptr, n * 4);
      Check("allocate", gpr_cuda_check(cuda, rc, pool ? "cuMemAllocFromPoolAsync" : "cuMemAlloc", &err), err);
    }
    float scale = 0.5f, bias = static_cast<float>(k);
    void *args[] = {&t->ptr, &n, &scale, &bias};
    unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    Check("launch", gpr_cuda_check(cuda, cuda->cuLaunchKernel(fill, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr),
                                   "cuLaunchKernel", &err), err);
    Check("event", gpr_cuda_record_event(cuda, stream, &t->ready, event_handle, &err), err);
    return t;
  }

  void Publish(uint64_t k) {
    gpr_error err{};
    gpr_frame_desc d{};
    std::unique_ptr<Tensor> t = Make(k, d.sync_handle);
    std::string tensor_format = "+w:" + std::to_string(cols);
    gpr_node_desc nodes[2] = {Node("tensor", tensor_format.c_str(), 1, rows), Node("item", "f", 2, uint64_t{rows} * cols)};
    nodes[0].child_count = 1;
    gpr_body_buffer buffers[3]{};  // tensor and item validity: absent (no nulls)
    Check("describe", gpr_cuda_describe_for(cuda, producer, t->ptr, uint64_t{rows} * cols * 4, &buffers[2], &err), err);
    d.row_count = rows;
    d.root_count = 1;
    d.node_count = 2;
    d.buffer_count = 3;
    d.nodes = nodes;
    d.buffers = buffers;
    d.sync_kind = GPR_SYNC_CUDA_EVENT;
    gpr_publish_options o{};
    o.user_tag = k;
    o.timeout_ms = 60000;
    o.on_release = OnRelease;
    o.context = t.get();
    uint64_t id = 0;
    Check("publish", gpr_producer_publish(producer, &d, &o, &id, &err), err);
    t.release();  // the frame owns it now; OnRelease frees it
    std::printf("{\"published\":%" PRIu64 ",\"rows\":%u,\"cols\":%u}\n", id, rows, cols);
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tensor_producer RING [ROWS [COLS [FRAMES [pool|vmm]]]]\n");
    return 2;
  }
  const char *ring = argv[1];
  Stage s;
  s.rows = argc > 2 ? static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 1024;
  s.cols = argc > 3 ? static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)) : 256;
  uint64_t frames = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 4;
  gpr_error err{};
  Check("load CUDA", gpr_cuda_get(&s.cuda, &err), err);
  Check("device 0", gpr_cuda_use_device(s.cuda, 0, &err), err);
  CUmodule module = nullptr;
  Check("load kernel", gpr_cuda_check(s.cuda, s.cuda->cuModuleLoadData(&module, kFillPtx), "cuModuleLoadData", &err), err);
  Check("kernel", gpr_cuda_check(s.cuda, s.cuda->cuModuleGetFunction(&s.fill, module, "gpr_fill"), "cuModuleGetFunction", &err), err);
  Check("stream", gpr_cuda_check(s.cuda, s.cuda->cuStreamCreate(&s.stream, 0), "cuStreamCreate", &err), err);
  if (argc > 5 && std::string(argv[5]) == "pool") s.MakeExportablePool();
  s.vmm = argc > 5 && std::string(argv[5]) == "vmm";
  gpr_segment seg;
  bool created = gpr_segment_create(&seg, ring, nullptr, &err) == 0;
  if (created) gpr_segment_close(&seg);
  else if (err.code != GPR_E_SEGMENT_EXISTS) Fail("create", err);
  Check("open", gpr_producer_open(ring, nullptr, &s.producer, &err), err);
  for (uint64_t k = 0; k < frames; k++) s.Publish(k);
  Check("drain", gpr_producer_drain(s.producer, 120000, &err), err);
  std::printf("{\"drained\":%" PRIu64 "}\n", frames);
  gpr_producer_close(s.producer);
  if (created) gpr_segment_unlink(ring, nullptr);
  return 0;
}
