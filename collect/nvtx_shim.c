/*
 * The three NVTX calls `collect` makes, compiled from NVIDIA's header-only NVTX3
 * (vendored unchanged in the workspace's vendor/nvtx3/). No NVTX library is linked: the inline
 * implementation looks up the tool named by NVTX_INJECTION64_PATH (set by Nsight Systems or
 * CUPTI) on first use and costs a branch when no tool is attached.
 */
#include "nvToolsExt.h"

int collect_nvtx_range_push(const char *message) { return nvtxRangePushA(message); }

int collect_nvtx_range_pop(void) { return nvtxRangePop(); }

void collect_nvtx_mark(const char *message) { nvtxMarkA(message); }
