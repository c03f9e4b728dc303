/* The entry point of libdistflow_cuda.so (cuda_backend.h "the module"). */
#include "backend/cuda/cuda_backend.h"

static const df_cuda_module module = {
    .module_bytes = sizeof(df_cuda_module),
    .ops_bytes = sizeof(df_backend_ops),
    .info_bytes = sizeof(df_cuda_info),
    .backend_open = df_backend_cuda_open,
    .device_count = df_cuda_device_count,
    .nccl_version = df_cuda_nccl_version,
    .create = df_cuda_create,
    .get_info = df_cuda_get_info,
    .free = df_cuda_free,
};

const df_cuda_module *df_cuda_module_get(void)
{
    return &module;
}
