{
  "targets": [
    {
      "target_name": "gpuring",
      "includes": ["sources.gypi"],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "interop/include"
      ],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_CPP_EXCEPTIONS", "NODE_ADDON_API_CPP_EXCEPTIONS_ALL"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++1y", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"],
      "libraries": ["-ldl", "-lpthread", "-lrt"]
    }
  ]
}
