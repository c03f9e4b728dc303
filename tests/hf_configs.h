/*
 * hf_configs.h — published Hugging Face config.json texts the model tests parse (the values as
 * released; keys such as auto_map that distflow ignores may be left out).
 */
#ifndef DF_TEST_HF_CONFIGS_H
#define DF_TEST_HF_CONFIGS_H

/* Qwen/Qwen3-8B's config.json as published (transformers 4.51). */
static const char *const k_qwen3_8b =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\", "
    "\"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 12288, "
    "\"max_position_embeddings\": 40960, \"max_window_layers\": 36, \"model_type\": \"qwen3\", "
    "\"num_attention_heads\": 32, \"num_hidden_layers\": 36, \"num_key_value_heads\": 8, "
    "\"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, "
    "\"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", "
    "\"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";

/* Qwen/Qwen3-30B-A3B's config.json as published (transformers 4.51). */
static const char *const k_qwen3_30b_a3b =
    "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"bos_token_id\": 151643, \"decoder_sparse_step\": 1, \"eos_token_id\": 151645, \"head_dim\": 128, "
    "\"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 6144, "
    "\"max_position_embeddings\": 40960, \"max_window_layers\": 48, \"mlp_only_layers\": [], "
    "\"model_type\": \"qwen3_moe\", \"moe_intermediate_size\": 768, \"norm_topk_prob\": true, "
    "\"num_attention_heads\": 32, \"num_experts\": 128, \"num_experts_per_tok\": 8, \"num_hidden_layers\": 48, "
    "\"num_key_value_heads\": 4, \"output_router_logits\": false, \"rms_norm_eps\": 1e-06, "
    "\"rope_scaling\": null, \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.001, "
    "\"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false, "
    "\"vocab_size\": 151936}";

/* Qwen/Qwen1.5-MoE-A2.7B-Chat's config.json (transformers 4.40; its quantised exports carry the
   same keys plus quantization_config): 60 routed experts of 1408, 4 a token, unnormalised, and a
   shared expert of 5632 on all 24 layers; about 14.3B parameters. */
static const char *const k_qwen15_moe_a27b =
    "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643, "
    "\"eos_token_id\": 151645, \"decoder_sparse_step\": 1, \"hidden_act\": \"silu\", \"hidden_size\": 2048, "
    "\"initializer_range\": 0.02, \"intermediate_size\": 5632, \"max_position_embeddings\": 32768, "
    "\"max_window_layers\": 21, \"model_type\": \"qwen2_moe\", \"moe_intermediate_size\": 1408, "
    "\"norm_topk_prob\": false, \"num_attention_heads\": 16, \"num_experts\": 60, \"num_experts_per_tok\": 4, "
    "\"num_hidden_layers\": 24, \"num_key_value_heads\": 16, \"output_router_logits\": false, "
    "\"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.001, "
    "\"shared_expert_intermediate_size\": 5632, \"sliding_window\": 32768, \"tie_word_embeddings\": false, "
    "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.0.dev0\", \"use_cache\": true, "
    "\"use_sliding_window\": false, \"vocab_size\": 151936}";

/* allenai/OLMoE-1B-7B-0924's config.json (transformers 4.43): 64 experts of 1024, 8 a token,
   unnormalised, on all 16 layers; q/k norms over the whole projections; about 6.9B parameters. */
static const char *const k_olmoe_1b_7b =
    "{\"architectures\": [\"OlmoeForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"clip_qkv\": null, \"eos_token_id\": 50279, \"hidden_act\": \"silu\", \"hidden_size\": 2048, "
    "\"initializer_range\": 0.02, \"intermediate_size\": 1024, \"max_position_embeddings\": 4096, "
    "\"model_type\": \"olmoe\", \"norm_topk_prob\": false, \"num_attention_heads\": 16, \"num_experts\": 64, "
    "\"num_experts_per_tok\": 8, \"num_hidden_layers\": 16, \"num_key_value_heads\": 16, "
    "\"output_router_logits\": false, \"pad_token_id\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, "
    "\"rope_theta\": 10000.0, \"router_aux_loss_coef\": 0.01, \"tie_word_embeddings\": false, "
    "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.0.dev0\", \"use_cache\": true, "
    "\"vocab_size\": 50304}";

/* mistralai/Mixtral-8x7B-v0.1's config.json as published (transformers 4.36). */
static const char *const k_mixtral_8x7b =
    "{\"architectures\": [\"MixtralForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1, "
    "\"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 14336, \"max_position_embeddings\": 32768, \"model_type\": \"mixtral\", "
    "\"num_attention_heads\": 32, \"num_experts_per_tok\": 2, \"num_hidden_layers\": 32, "
    "\"num_key_value_heads\": 8, \"num_local_experts\": 8, \"output_router_logits\": false, "
    "\"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.02, "
    "\"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.36.0.dev0\", \"use_cache\": true, \"vocab_size\": 32000}";

/* meta-llama/Llama-3.2-1B's config.json. */
static const char *const k_llama32_1b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"bos_token_id\": 128000, \"eos_token_id\": 128001, \"head_dim\": 64, \"hidden_act\": \"silu\", "
    "\"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 8192, "
    "\"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\", "
    "\"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, "
    "\"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, "
    "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, "
    "\"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, "
    "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, "
    "\"vocab_size\": 128256}";

/* mistralai/Mistral-7B-v0.1's config.json: the window on every layer. */
static const char *const k_mistral_v01 =
    "{\"architectures\": [\"MistralForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2, "
    "\"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 14336, \"max_position_embeddings\": 32768, \"model_type\": \"mistral\", "
    "\"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, "
    "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"sliding_window\": 4096, "
    "\"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": "
    "\"4.34.0.dev0\", \"use_cache\": true, \"vocab_size\": 32000}";

/* mistralai/Mistral-7B-v0.3's config.json: no window. */
static const char *const k_mistral_v03 =
    "{\"architectures\": [\"MistralForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1, "
    "\"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 14336, \"max_position_embeddings\": 32768, \"model_type\": \"mistral\", "
    "\"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, "
    "\"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, \"sliding_window\": null, "
    "\"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": "
    "\"4.42.0.dev0\", \"use_cache\": true, \"vocab_size\": 32768}";

/* microsoft/Phi-3-mini-4k-instruct's config.json (transformers 4.40; its auto_map left out): the
   window on every layer. */
static const char *const k_phi3_mini =
    "{\"_name_or_path\": \"Phi-3-mini-4k-instruct\", \"architectures\": [\"Phi3ForCausalLM\"], "
    "\"attention_dropout\": 0.0, \"bos_token_id\": 1, \"embd_pdrop\": 0.0, \"eos_token_id\": 32000, "
    "\"hidden_act\": \"silu\", \"hidden_size\": 3072, \"initializer_range\": 0.02, \"intermediate_size\": 8192, "
    "\"max_position_embeddings\": 4096, \"model_type\": \"phi3\", \"num_attention_heads\": 32, "
    "\"num_hidden_layers\": 32, \"num_key_value_heads\": 32, \"original_max_position_embeddings\": 4096, "
    "\"pad_token_id\": 32000, \"resid_pdrop\": 0.0, \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, "
    "\"rope_theta\": 10000.0, \"sliding_window\": 2047, \"tie_word_embeddings\": false, "
    "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.2\", \"use_cache\": true, "
    "\"attention_bias\": false, \"vocab_size\": 32064}";

/* microsoft/Phi-4-mini-instruct's config.json (its auto_map left out): partial_rotary_factor 0.75
   (96 of 128 dims rotated, so 48 LongRoPE factors per list), tied embeddings, 200064 tokens. */
static const char *const k_phi4_mini =
    "{\"architectures\": [\"Phi3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"bos_token_id\": 199999, \"embd_pdrop\": 0.0, \"eos_token_id\": 200020, \"full_attn_mod\": 1, "
    "\"hidden_act\": \"silu\", \"hidden_size\": 3072, \"initializer_range\": 0.02, \"intermediate_size\": 8192, "
    "\"interpolate_factor\": 1, \"lm_head_bias\": false, \"max_position_embeddings\": 131072, \"mlp_bias\": false, "
    "\"model_type\": \"phi3\", \"num_attention_heads\": 24, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, "
    "\"original_max_position_embeddings\": 4096, \"pad_token_id\": 199999, \"partial_rotary_factor\": 0.75, "
    "\"resid_pdrop\": 0.0, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"long_factor\": ["
    "1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649, 2.446418898, 2.735880826, "
    "3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845, 5.351743533, 5.984965424, 6.693110555, 7.485043894, 8.370679318, "
    "9.36110372, 10.4687158, 11.70738129, 13.09260651, 14.64173252, 16.37415215, 18.31155283, 20.47818807, 22.90118105, 25.61086418, "
    "28.64115884, 32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7, "
    "32.71, 32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77], "
    "\"short_factor\": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, "
    "1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, "
    "1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], \"type\": \"longrope\"}, "
    "\"rope_theta\": 10000.0, \"sliding_window\": 262144, \"tie_word_embeddings\": true, "
    "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.45.0\", \"use_cache\": true, "
    "\"vocab_size\": 200064}";

/* allenai/OLMo-2-0425-1B's config.json: its published architecture values (sizes, heads,
 * vocabulary, rope_theta 500000 as an integer, eps, positions, untied); the bookkeeping keys
 * (eos / pad ids, torch_dtype, transformers_version) as OLMo 2 releases write them, not checked
 * against the file. OLMo-2-1124-7B / 13B and the RLVR Instruct models have the same keys. */
static const char *const k_olmo2_1b =
    "{\"architectures\": [\"Olmo2ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"eos_token_id\": 100257, \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 8192, \"max_position_embeddings\": 4096, \"model_type\": \"olmo2\", "
    "\"num_attention_heads\": 16, \"num_hidden_layers\": 16, \"num_key_value_heads\": 16, "
    "\"pad_token_id\": 100277, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 500000, "
    "\"tie_word_embeddings\": false, \"torch_dtype\": \"float32\", \"transformers_version\": \"4.48.3\", "
    "\"use_cache\": true, \"vocab_size\": 100352}";

/* google/gemma-3-1b-it's config.json: its published architecture values (hidden 1152, 26 layers,
 * 4 heads over 1 key/value head of head_dim 256, intermediate 6912, vocabulary 262144, window 512
 * with sliding_window_pattern 6, query_pre_attn_scalar 256, rope_local_base_freq 10000 and
 * rope_theta 1e6 as integers, no rope_scaling, no soft-capping); the bookkeeping keys (eos list,
 * cache_implementation, transformers_version) as Gemma 3's release writes them. */
static const char *const k_gemma3_1b =
    "{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\", "
    "\"eos_token_id\": [1, 106], \"final_logit_softcapping\": null, \"head_dim\": 256, "
    "\"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 1152, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 6912, \"max_position_embeddings\": 32768, \"model_type\": \"gemma3_text\", "
    "\"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1, "
    "\"pad_token_id\": 0, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, "
    "\"rope_local_base_freq\": 10000, \"rope_scaling\": null, \"rope_theta\": 1000000, "
    "\"sliding_window\": 512, \"sliding_window_pattern\": 6, \"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.50.0.dev0\", \"use_cache\": true, \"vocab_size\": 262144}";

/* google/gemma-2-2b's config.json: its published architecture values (hidden 2304, 26 layers, 8
 * heads over 4 key/value heads of head_dim 256, intermediate 9216, vocabulary 256000, window 4096
 * on the even layers (no layer_types: Gemma2Config alternates), query_pre_attn_scalar 256, soft-caps
 * 50 / 30, rope_theta 10000) with both activation keys, as its release writes them. */
static const char *const k_gemma2_2b =
    "{\"architectures\": [\"Gemma2ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"attn_logit_softcapping\": 50.0, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\", "
    "\"eos_token_id\": 1, \"final_logit_softcapping\": 30.0, \"head_dim\": 256, "
    "\"hidden_act\": \"gelu_pytorch_tanh\", \"hidden_activation\": \"gelu_pytorch_tanh\", "
    "\"hidden_size\": 2304, \"initializer_range\": 0.02, \"intermediate_size\": 9216, "
    "\"max_position_embeddings\": 8192, \"model_type\": \"gemma2\", \"num_attention_heads\": 8, "
    "\"num_hidden_layers\": 26, \"num_key_value_heads\": 4, \"pad_token_id\": 0, "
    "\"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, "
    "\"sliding_window\": 4096, \"torch_dtype\": \"float32\", \"transformers_version\": \"4.42.4\", "
    "\"use_cache\": true, \"vocab_size\": 256000}";

#endif
