/*
 * kernels_rename.h (internal) — the first include of every multi-compiled
 * engine kernel TU (util/kernels.h): in a variant build each function they
 * define becomes name__<variant>, and their calls into the model kernels go to
 * the same variant's copies directly. The plain names are the wrappers of
 * kernels_dispatch.c.
 */
#ifndef DF_ENGINE_KERNELS_RENAME_H
#define DF_ENGINE_KERNELS_RENAME_H

#include "model/kernels_rename.h"

#if defined(DF_KVARIANT)
/* sampling.c */
#define df_sample_work_bytes DF_KSYM(df_sample_work_bytes)
#define df_sampling_params_defaults DF_KSYM(df_sampling_params_defaults)
#define df_sampling_params_validate DF_KSYM(df_sampling_params_validate)
#define df_sample_token DF_KSYM(df_sample_token)
#define df_sample_token_u DF_KSYM(df_sample_token_u)
#define df_sample_probs DF_KSYM(df_sample_probs)
#endif

#endif /* DF_ENGINE_KERNELS_RENAME_H */
