/*
 * cli/cuda_module.h — the CUDA backend, loaded on first use from libdistflow_cuda.so beside the
 * distflow executable (docs/cuda.md "The module"). Only in builds with the CUDA backend
 * (DF_HAVE_CUDA); CPU commands never load the module or the CUDA libraries it links.
 */
#ifndef DF_CLI_CUDA_MODULE_H
#define DF_CLI_CUDA_MODULE_H

#include "backend/cuda/cuda_backend.h"

/**
 * The module's table, loading it on the first call (kept for the process's life; not
 * thread-safe). Errors: DF_EUNSUPPORTED naming the module's path and the loader's message (a
 * missing file, a missing CUDA library), or a module of another build; DF_EIO when the
 * executable's own path cannot be read.
 */
int df_cli_cuda_module(const df_cuda_module **out);
/** df_backend_open_fn of "cuda" (main.c registers it): the module's df_backend_cuda_open. */
int df_cli_cuda_backend_open(df_backend *out);

#endif /* DF_CLI_CUDA_MODULE_H */
