/*
 * kernels_rename.h (internal) — the first include of every multi-compiled
 * model kernel TU (util/kernels.h explains the scheme): in a variant build each
 * function those TUs define becomes name__<variant>. The plain names are the
 * wrappers of kernels_dispatch.c. Keep this list and that file in step with
 * the functions of DF_KERNEL_SOURCES (cmake/KernelVariants.cmake).
 */
#ifndef DF_MODEL_KERNELS_RENAME_H
#define DF_MODEL_KERNELS_RENAME_H

#include "util/kernels.h"

#if defined(DF_KVARIANT)
/* ops_attention.c, ops_attention_vec.c (the latter called only by the former) */
#define df_attention_fwd DF_KSYM(df_attention_fwd)
#define df_attention_bwd DF_KSYM(df_attention_bwd)
#define df_attn_vec_fwd_head DF_KSYM(df_attn_vec_fwd_head)
#define df_attn_vec_bwd_group DF_KSYM(df_attn_vec_bwd_group)
/* ops_basic.c */
#define df_embedding_fwd DF_KSYM(df_embedding_fwd)
#define df_embedding_fwd_bf16 DF_KSYM(df_embedding_fwd_bf16)
#define df_embedding_bwd DF_KSYM(df_embedding_bwd)
#define df_rmsnorm_fwd DF_KSYM(df_rmsnorm_fwd)
#define df_rmsnorm_bwd DF_KSYM(df_rmsnorm_bwd)
#define df_rope_table DF_KSYM(df_rope_table)
#define df_rope_table_freq DF_KSYM(df_rope_table_freq)
#define df_rope_apply DF_KSYM(df_rope_apply)
#define df_rope_fwd DF_KSYM(df_rope_fwd)
#define df_rope_bwd DF_KSYM(df_rope_bwd)
#define df_swiglu_fwd DF_KSYM(df_swiglu_fwd)
#define df_swiglu_bwd DF_KSYM(df_swiglu_bwd)
#define df_geglu_fwd DF_KSYM(df_geglu_fwd)
#define df_geglu_bwd DF_KSYM(df_geglu_bwd)
/* ops_vocab.c */
#define df_vocab_tiling_default DF_KSYM(df_vocab_tiling_default)
#define df_vocab_tiling_for DF_KSYM(df_vocab_tiling_for)
#define df_vocab_tiling_clamp DF_KSYM(df_vocab_tiling_clamp)
#define df_vocab_groups DF_KSYM(df_vocab_groups)
#define df_row_max DF_KSYM(df_row_max)
#define df_row_find DF_KSYM(df_row_find)
#define df_row_exp DF_KSYM(df_row_exp)
#define df_row_exp_f64 DF_KSYM(df_row_exp_f64)
#define df_row_cdf_find DF_KSYM(df_row_cdf_find)
#define df_vocab_stats DF_KSYM(df_vocab_stats)
#define df_vstat_merge DF_KSYM(df_vstat_merge)
#define df_vocab_draw DF_KSYM(df_vocab_draw)
#define df_vocab16_rows DF_KSYM(df_vocab16_rows)
#define df_vocab_stats16 DF_KSYM(df_vocab_stats16)
#define df_vocab_draw16 DF_KSYM(df_vocab_draw16)
/* ops_lmhead.c */
#define df_lmhead_scratch_floats DF_KSYM(df_lmhead_scratch_floats)
#define df_lmhead_scratch_floats_tiled DF_KSYM(df_lmhead_scratch_floats_tiled)
#define df_lmhead_fwd DF_KSYM(df_lmhead_fwd)
#define df_lmhead_bwd DF_KSYM(df_lmhead_bwd)
#define df_lmhead_fwd_tiled DF_KSYM(df_lmhead_fwd_tiled)
#define df_lmhead_bwd_tiled DF_KSYM(df_lmhead_bwd_tiled)
#define df_lmhead_scratch_floats16 DF_KSYM(df_lmhead_scratch_floats16)
#define df_lmhead_fwd16 DF_KSYM(df_lmhead_fwd16)
#define df_lmhead_bwd16 DF_KSYM(df_lmhead_bwd16)
/* ops_kv.c */
#define df_kv_write DF_KSYM(df_kv_write)
#define df_kv_copy DF_KSYM(df_kv_copy)
#define df_kv_scratch_floats DF_KSYM(df_kv_scratch_floats)
#define df_kv_attention DF_KSYM(df_kv_attention)
/* optim_step.c */
#define df_adamw_step DF_KSYM(df_adamw_step)
#define df_grad_norm DF_KSYM(df_grad_norm)
#define df_clip_grad_norm DF_KSYM(df_clip_grad_norm)
#endif

#endif /* DF_MODEL_KERNELS_RENAME_H */
