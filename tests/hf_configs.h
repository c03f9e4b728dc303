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

#endif
