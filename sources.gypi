{
  "sources": [
    "native/addon.cc",
    "native/attachment.cc",
    "native/errors.cc",
    "native/segment_handle.cc",
    "native/producer_core.cc",
    "native/consumer_core.cc",
    "native/arena_map.cc",
    "native/cuda_api.cc",
    "native/cuda_context.cc",
    "native/cuda_driver.cc",
    "native/cuda_ipc.cc",
    "native/ipc_handle_cache.cc",
    "native/parallel_copy.cc",
    "native/pinned_host_pool.cc"
  ]
}
