#!/usr/bin/env bash
# Regenerate docs/configuration.md from the key tables (include/distflow/{train,sft}_config.def).
#   scripts/gen-config-docs.sh [DISTFLOW [OUT]]   OUT (default docs/configuration.md): where to write
#   (test_config_docs writes elsewhere and compares: the committed file must be what this gives)
set -euo pipefail
DF=$(realpath "${1:-build/distflow}")
OUT=$(realpath -m "${2:-$(dirname "$0")/../docs/configuration.md}")
cd "$(dirname "$0")/.."
{
  cat <<'HEAD'
# Configuration reference

`distflow train` and `distflow sft` read a YAML file, then apply Hydra-style dotted overrides
from the command line (`actor_rollout_ref.rollout.n=8`, `+key=value` and `++key=value` are
accepted too). Key names and defaults follow siiRL / verl; OmegaConf interpolation (`${key}`,
relative `${.key}`) works as in verl's own YAML, and so does the whole-value resolver of verl's
generated configs, `${oc.select:key,default}` (the key's value; the default, null without one, where
the key is not in the table, as for a group or a path inside a map); other resolvers (`oc.env`, ...)
are refused. verl's complete layout (its `_generated_ppo_trainer.yaml`) loads: `_target_` entries
are skipped (inside maps too), and OmegaConf's `???` (no value given) leaves a key without effect at
its default and is refused on any other key. Unknown keys, wrong types and out-of-range values
are errors that name the file and line (or "command line") and suggest the closest key.
`distflow config show CONFIG [overrides]` prints the resolved configuration with the source of
every non-default value.

### Keys distflow has no use for

Every key does what its line says, with two marked exceptions, so that no setting is silently
ignored:

- **[no effect in distflow]**: accepted so that verl / siiRL files load unchanged; every value gives
  the same run (FSDP, vLLM, Ray and Megatron plumbing, offloading, `torch.compile`, ...). A value
  other than the default is named in one warning before the run starts
  (`N settings with no effect in distflow: key=value (file:line), ...`).
- **[not supported by distflow]**: a feature distflow lacks (`data.custom_cls`,
  `rollout.skip_rollout`, FIRE sampling, Megatron's learning-rate schedules, ...). Only the default is
  accepted; another value is refused with the key, the value, where it was set and what the key
  would do. Writing the default out, as verl's own files do, is fine.

A key's table entry carries its class (`DFK_NO_EFFECT(...)` / `DFK_UNSUPPORTED(...)` in
`include/distflow/train_config.def` / `sft_config.def`; `df_config_check_compat` applies it). The
test `test_config_readers` (`scripts/check-config-readers.sh`) compiles the library with every
field of the typed config structs marked deprecated, so the compiler names each key the code reads;
a key that nothing reads and that carries no class fails the suite.

Keys of type `map` are siiRL's free-form dict arguments (`model.override_config`,
`fsdp_config.wrap_policy`, `rollout.engine_kwargs.vllm`, the `megatron` blocks, `ray_init`,
`profiler`, `hydra`, ...). They take any YAML mapping (nested, with lists) or null; nothing under
them is checked by the config reader (the code that uses a map checks its entries:
`model.override_config` against the model's config.json, docs/models.md). The value is kept as canonical flow YAML (`{a: 1, b: [x, y]}`), which
`config show` prints. Set a whole map with `key={a: 1}` or one entry inside it with a dotted
override (`actor_rollout_ref.model.override_config.max_position_embeddings=32768`); `${...}` inside a
map is kept as text. Code that hands a map on as data (chat-template kwargs, an environment's
config, reward kwargs) reads it as JSON through `df_config_map_json`, the same YAML -> JSON walker
(`src/config/yaml_json.h`) that reads the agent's tool, interaction and environment files: plain
scalars typed as the keys here are (null / ~, true / false / yes / no / on / off, integers with
0x / 0o / `_`, finite floats, else strings; quoted ones are strings), `<<` merge keys applied, a
key given twice refused.

One group is open: `custom_reward_function.reward_kwargs` has typed keys (the built-in scorers'
options, checked as any key) and takes keys of any other name too, with any YAML value, as the
keyword arguments verl passes to a Python reward function (`reward_kwargs: {my_threshold: 0.3}`,
`custom_reward_function.reward_kwargs.my_threshold=0.3`, `+...`). Its line below reads
`custom_reward_function.reward_kwargs.*`; the other names are kept as one map (typed field
`extra`), which `config show` prints as keys of the group, each with the place the last of them
was set. A dotted path below a typed key is still an unknown key, and every other group refuses
unknown keys.

Which command checks what: `distflow plan`, `distflow config check --world N` and `distflow
train` run the same validation (`df_train_check`, docs/architecture.md, "Validation: one path for
plan, config check and train") before anything is loaded: the keys below, the settings distflow
cannot honour yet, the pipeline or workflow file (executables, plugins read without loading them,
each node's `config:` keys), model-parallel and batch sizes for the job's ranks (`train`: the
launched ranks; `config check` and `plan`: `--world N`, by default the ranks `train` started the
same way would have: the mpirun world, 1 outside mpirun), then the files: the model directories
exist (a missing hub id `Org/Name` gets a "download it first" hint), the data files exist, and
every `data_source` of the rows the run reads has a scorer (unless `custom_reward_function.path`
scores every row; the training rows' unless a reward model scores them, `reward_model.enable`). A config one of them accepts, the others accept, and a refusal reads the same in
all three; loading the weights, the tokenizer and the prompts is left to `train`.

### Sequence lengths and the model's positions

No position past a model's `max_position_embeddings` (its `config.json`) is run: a Qwen2 / Llama
checkpoint has no defined quality there, and since RoPE gives any position an angle nothing would
fail. As verl checks `max_model_len` (`rollout.prompt_length + response_length`) against the
model's config before it starts vLLM, and vLLM refuses a `max_model_len` above the model's, the
commands compare the job's longest sequence with every model's before anything is loaded or
written (a non-zero exit naming the keys, their values and where they were set, the model's
`config.json` and its `max_position_embeddings`; `src/workers/common/max_pos.h`):

- `train` (in `df_train_check`, so `plan` and `config check` too): `data.max_prompt_length +
  actor_rollout_ref.rollout.response_length` (the rollout's slot; with `model_type=embodied` one
  call's `action_chunks_len x action_token_len` tokens when longer; `rollout.max_model_len` when
  set and longer) against `actor_rollout_ref.model.path` (rollout, actor, reference),
  `critic.model.path` with a critic, and the directory a workflow node sets for its agent group
  or critic (that node's lengths); `reward_model.model.path` against its input: with
  `reward_model.model.input_tokenizer` the re-templated text cut at `reward_model.max_length`
  (null: `data.max_prompt_length + data.max_response_length`), without it the policy's ids.
  Nothing grows a sequence past that bound: a multi-turn conversation's tool responses and user
  turns count against `response_length` (docs/agents.md), a chained multi-agent episode ends when
  an agent's prompt would pass `data.max_prompt_length` (docs/multi_agent.md).
- `sft`: `data.max_length` (a multi-turn conversation's whole length) against
  `model.partial_pretrain`.
- `eval`: `--max-prompt-length + --max-response-length` against `--model`; without
  `--max-prompt-length` its default (1024) shrinks to what fits, the longer prompts skipped and
  counted as any over the limit. `embodied eval`: `data.max_prompt_length` and one call's action
  tokens.

Behind these checks the engine refuses such a sequence itself (`DF_EINVAL`, one comparison per
request or sequence): a rollout request whose prompt + min(max_new_tokens, slot length - prompt)
passes the model's range (`df_rollout_generate`, a stream's feed), a forward of a longer
sequence (`df_model_forward`, `df_model_forward_values`: actor, reference, critic, reward model).

This file is generated by `scripts/gen-config-docs.sh` from the key tables
`include/distflow/train_config.def` and `include/distflow/sft_config.def` (and the script's own
text): edit those and rerun it; the test `test_config_docs` fails when this file differs from
what the script makes.

### One table, three uses

Each key is one line of its table: group, name, type, default, bounds or choices, help
(`DFK_F(algorithm, gamma, "1.0", 0, 1, "discount factor")`). The same line gives

- the schema entry the loader checks values against, `distflow config help` and this page;
- a field of the typed struct (`include/distflow/train_config.h`: `df_train_config`,
  `include/distflow/sft_config.h`: `df_sft_config`), nested as the YAML is:
  `cfg.actor_rollout_ref.actor.optim.lr`, `cfg.algorithm.gamma`;
- its binding for the resolver, `df_train_config_resolve()`, which fills the whole struct
  from a loaded config in one pass.

The code reads the struct, never a key by its string, so a misspelt key is a compile
error. The loaded config (`df_config`) stays the layer that reads YAML and the command
line and remembers where each value came from, for messages. Field types: `bool`,
`int64_t`, `double` for keys that are never null once loaded (a derived default such as
`clip_ratio_low`, null until it takes `clip_ratio`'s value, is one); `df_config_opt_int` /
`_float` / `_bool` (`.set`, `.v`) for nullable keys; `const char *` for strings, choices
(kept as the strings the loader checked) and maps (their flow YAML), NULL when null;
`df_config_strs` / `df_config_floats` for lists. Strings and lists point into the loaded
config, so the struct lives as long as it.

The DAG worker resolves the struct once for the global configuration and once for each
workflow node whose `config:` overrides keys (the node's keys over the global ones), and
derives, in one place (`src/workers/common/resolve.c`), what comes from several keys or from the
workflow: the actor's log-prob temperature (the workflow's rollout node's), the policy
loss (`cpgd` when `use_cpgd_loss` or the estimator implies it, with `loss_mode=vanilla`), the
seq-mean-token-sum-norm length (`loss_scale_factor`, else `data.max_response_length`),
mini-batch sizes in samples, the optimizer's total and warmup steps, the sampling
settings.

## `distflow train`

```
HEAD
  "$DF" config help
  printf '```\n\n## `distflow sft`\n\n```\n'
  "$DF" config help --sft
  printf '```\n'
} > "$OUT"
