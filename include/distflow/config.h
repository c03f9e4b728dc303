/*
 * distflow/config.h — typed configuration: a YAML file plus Hydra-style dotted
 * overrides, checked against a per-command schema (siiRL / verl key names).
 *
 *   distflow train cfg.yaml actor_rollout_ref.rollout.n=8 data.train_batch_size=64
 *
 * Schema. One table per command (df_config_schema_train(), df_config_schema_sft()),
 * expanded from the key tables include/distflow/train_config.def and
 * sft_config.def. Each entry is one line: dotted key, type, nullable or not,
 * default (as YAML text), bounds or allowed values, and a one-line help. The
 * same lines generate the typed structs (distflow/train_config.h,
 * distflow/sft_config.h) through which code reads a loaded config: the string
 * getters below are the loading layer's, for tools and tests. Keys and defaults follow
 * siiRL's argument dataclasses (siirl/params/) and verl's ppo_trainer.yaml /
 * fsdp_sft_trainer.yaml; where the two disagree siiRL's default is used.
 *
 * Loading order: schema defaults, then the YAML file, then the overrides in
 * command-line order (a later one wins), then resolution:
 *   1. interpolations `${other.key}` (OmegaConf syntax) are replaced by the
 *      referenced key's resolved value. A value that is exactly `${k}` copies k's
 *      value whatever its type (int, list, null, ...); inside a longer string the
 *      value's text is spliced in (`checkpoints/${trainer.project_name}`).
 *      Resolvers (`${oc.env:X}`) are not supported.
 *   2. derived defaults: a null value of an entry with `null_from` takes that
 *      key's value (verl's semantics: rollout.response_length null ->
 *      data.max_response_length, actor.clip_ratio_low null -> actor.clip_ratio).
 * Values are checked (type, null, bounds, choices) when assigned and again when
 * an interpolation or a derived default fills them.
 *
 * YAML. Nested mappings become dotted keys (a dotted key inside a mapping,
 * `actor.optim.lr: 1e-6`, is the same key). Anchors, aliases and `<<` merge keys
 * resolve. A key given twice in the file is an error. A scalar is typed by the
 * key it is assigned to, not by its YAML spelling: `1` is fine for a float key,
 * `"64"` (quoted) for an int key; `1.0` for an int key is not. A plain `~`,
 * `null` or empty value is null; a quoted "null" is a string. A single scalar is
 * accepted where a list is expected (a one-item list, as verl does for
 * data.train_files). A null (or empty) value for a group (`critic:`) sets nothing.
 * `_target_` keys (verl's dataclass hints in copied configs) are ignored.
 *
 * Map keys (DF_CFG_MAP). siiRL's free-form dict arguments (model.override_config,
 * fsdp_config.wrap_policy, rollout.engine_kwargs.vllm, megatron blocks, ...)
 * take any mapping (nested, lists inside) or null; nothing under them is
 * checked and nothing under them is an "unknown key". The content is kept as
 * canonical flow YAML text (df_config_map_text): `{a: 1, b: [x, "y z"], c: null}`
 * -- keys in file order, `, ` between items, plain scalars kept as written
 * when they need no quotes in flow context, otherwise double-quoted; quoted
 * scalars stay strings (quoted unless unambiguous). `${...}` inside a map is
 * kept as literal text (a whole-value `${map.key}` at the map key itself does
 * resolve). A scalar or list at a map key, or a mapping at a scalar key, is an
 * error naming the place. A dotted key that reaches below a map key
 * (`actor_rollout_ref.model.override_config.max_position_embeddings=32768`, Hydra's way
 * of editing a dict) sets that entry inside the map, creating nested mappings
 * as needed and replacing a non-mapping on the way.
 *
 * Open groups. A group whose table ends with DFK_OPEN (config_table_begin.h;
 * train: custom_reward_function.reward_kwargs, verl's kwargs dict of a Python
 * reward function) takes keys of any other name too, with any YAML value. Its
 * typed keys keep their types, checks and defaults; every other name under the
 * group (`reward_kwargs: {bonus: 0.25}`, `reward_kwargs.bonus: 0.25`,
 * `custom_reward_function.reward_kwargs.bonus=0.25`, a mapping value, a dotted
 * path into one) is an entry of the map key "<group>.*" (typed field `extra`),
 * patched as a map key's entries are. A path below a typed key
 * (`reward_kwargs.method.x`) stays an unknown key, and "<group>.*" itself cannot
 * be set. df_config_dump writes each entry as a key of the group,
 * df_config_dump_set one line per entry; df_config_where of an entry's key is
 * the map key's (the last place that set any of them). Every other group
 * refuses an unknown key.
 *
 * Overrides: `key=value`, `+key=value` and `++key=value` (Hydra's prefixes; the
 * key must still be in the schema, or lie in an open group). The value is parsed as one YAML value:
 * true/false, 64, 1e-6, null, 'quoted', [a,b]; a mapping is accepted for a group
 * key (`actor_rollout_ref.actor.optim={lr: 1e-5}`) and for a map key
 * (`ray_init={num_cpus: 8}`). An empty value (`key=`) is
 * the empty string, as in Hydra. Deleting (`~key`) is not supported.
 *
 * Errors: every loader failure returns DF_EINVAL (DF_EIO when the file cannot
 * be read) with a message that names the place and the key, e.g.
 *   cfg.yaml:12: unknown key 'actor_rollout_ref.actor.clip_ratoi' (did you mean
 *     'actor_rollout_ref.actor.clip_ratio'?)
 *   cfg.yaml:7: data.train_batch_size: expected an integer, got "abc"
 *   cfg.yaml:3:5: mapping values are not allowed in this context   (YAML syntax)
 *   command line: 'data.train_batch_size=0': data.train_batch_size: must be >= 1, got 0
 * Reading a key that is not in the schema, with the getter of another type, or
 * reading a null value with an int / float / bool getter is a programming error
 * and asserts (with NDEBUG the getter returns 0 / false / NULL instead).
 *
 * Thread safety: a df_config is immutable after loading except through
 * df_config_set(); concurrent readers are fine. Schemas are static tables.
 */
#ifndef DISTFLOW_CONFIG_H
#define DISTFLOW_CONFIG_H

#include <stdio.h>

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_config df_config;
typedef struct df_config_schema df_config_schema;

/** Value types of schema entries. */
typedef enum {
    DF_CFG_BOOL,       /**< true/false (also yes/no, on/off, any case) */
    DF_CFG_INT,        /**< int64; decimal, 0x hex, `_` digit separators */
    DF_CFG_FLOAT,      /**< double; 1e-6, .5, .inf; an integer is accepted */
    DF_CFG_STR,        /**< any text */
    DF_CFG_STR_LIST,   /**< list of strings; a single string is a one-item list */
    DF_CFG_FLOAT_LIST, /**< list of doubles (e.g. optim.betas) */
    DF_CFG_MAP         /**< any YAML mapping or null; content kept as text, not validated */
} df_config_type;

/**
 * One schema line. Bounds are inclusive; -INFINITY / INFINITY when open.
 * For DF_CFG_FLOAT_LIST the bounds apply to each item.
 */
typedef struct df_config_entry {
    const char *key;       /**< dotted key, e.g. "actor_rollout_ref.actor.clip_ratio" */
    df_config_type type;
    bool nullable;         /**< may be null (`~`) */
    const char *dflt;      /**< default as YAML text: "0.2", "null", "[console]" */
    double min, max;       /**< int / float bounds */
    int list_len;          /**< lists: exact item count required; 0 = any */
    const char *choices;   /**< strings / string-list items: "a|b|c"; NULL = any */
    const char *null_from; /**< null resolves to this key's value after loading */
    const char *help;      /**< one line; says "no effect" for compatibility keys */
} df_config_entry;

/*
 * Value types of the typed configuration structs (distflow/train_config.h,
 * distflow/sft_config.h). A nullable int / float / bool key is a
 * df_config_opt_*: `set` false when the value is null. A string or map key is
 * a `const char *` (NULL when null; a map holds its canonical flow-YAML text).
 * Lists point into the df_config they were resolved from.
 */
typedef struct df_config_opt_int {
    bool set;  /**< false: the key is null */
    int64_t v; /**< the value when set, else 0 */
} df_config_opt_int;
typedef struct df_config_opt_float {
    bool set;
    double v;
} df_config_opt_float;
typedef struct df_config_opt_bool {
    bool set;
    bool v;
} df_config_opt_bool;
typedef struct df_config_strs {
    const char *const *items; /**< [n], owned by the df_config */
    int n;
    bool null; /**< the key is null (n is 0); an empty list is n 0, null false */
} df_config_strs;
typedef struct df_config_floats {
    const double *items; /**< [n], owned by the df_config */
    int n;
} df_config_floats;
/** True if the string list `l` holds `item` (exact match). */
DF_API bool df_config_strs_has(const df_config_strs *l, const char *item);

/** Schema of `distflow train` (siiRL / verl RL trainer keys). Never NULL. */
DF_API const df_config_schema *df_config_schema_train(void);
/** Schema of `distflow sft` (verl fsdp_sft_trainer.yaml keys). Never NULL. */
DF_API const df_config_schema *df_config_schema_sft(void);

/** Schema name: "train" or "sft". */
DF_API const char *df_config_schema_name(const df_config_schema *s);
/** Number of entries. */
DF_API int df_config_schema_count(const df_config_schema *s);
/** i-th entry in table order (0 <= i < count). */
DF_API const df_config_entry *df_config_schema_at(const df_config_schema *s, int i);
/** Entry of `key`, or NULL when the schema has no such key. */
DF_API const df_config_entry *df_config_schema_find(const df_config_schema *s, const char *key);
/** "bool", "int", "float", "str", "list[str]", "list[float]", "map". */
DF_API const char *df_config_type_name(df_config_type t);

/**
 * Print help for every entry whose key is `prefix` or lies under it (whole
 * dotted components: "data" matches "data.seed", not "database"); prefix NULL
 * or "" prints all. Per entry: `key  type [nullable]  default: D  [bounds]`
 * then the help text indented on the next line; an open group's "<group>.*"
 * entry reads `<group>.*  any other key: any YAML value`.
 * Returns DF_ENOTFOUND (with a "did you mean" hint) when nothing matches,
 * DF_EIO when writing fails.
 */
DF_API int df_config_schema_print(const df_config_schema *s, const char *prefix, FILE *f);

/**
 * What distflow does with a key it carries over from verl / siiRL without a use for it. The
 * key tables mark such a key by wrapping its entry in DFK_NO_EFFECT(...) or DFK_UNSUPPORTED(...)
 * (distflow/config_table_begin.h); every other key must do what its help says, which
 * scripts/check-config-readers.sh checks (a key nothing reads fails the test suite).
 */
typedef enum df_config_compat {
    DF_CFG_EFFECTIVE = 0, /**< the key does what its help says */
    DF_CFG_NO_EFFECT,     /**< accepted so that verl / siiRL files load; every value gives the same run
                               (engine plumbing such as FSDP or vLLM settings); a value other than the
                               default is named in a warning before the run (df_config_check_compat) */
    DF_CFG_UNSUPPORTED    /**< a feature distflow lacks: only the default is accepted, another value is
                               refused (df_config_check_compat) */
} df_config_compat;

/* Built with -DDF_CFG_AUDIT (scripts/check-config-readers.sh only), every field of the typed
   config structs is marked deprecated with its key, so that the compiler names each key a source
   file reads. */
#ifdef DF_CFG_AUDIT
#define DF_CFG_AUDIT_ATTR(table, key) __attribute__((deprecated("distflow-config-read " table ":" key)))
#else
#define DF_CFG_AUDIT_ATTR(table, key)
#endif

/** Entry i's class (DF_CFG_EFFECTIVE for an index out of range). */
DF_API df_config_compat df_config_schema_compat(const df_config_schema *s, int i);

/** A string-list key of a config and its typed value, for the checks that take several. */
typedef struct df_config_list_ref {
    const df_config_strs *list;
    const char *key;
} df_config_list_ref;

/**
 * The output settings `train` and `sft` share, checked on a loaded config of either schema:
 * trainer.logger names only loggers distflow has (DF_EUNSUPPORTED naming the first other one and
 * the list, logging/loggers.h), trainer.tensorboard_dir is not set without `tensorboard` in it
 * (DF_EINVAL: no event file would be written), and each of the n checkpoint contents lists names
 * model, optimizer and extra (DF_EUNSUPPORTED: a distflow checkpoint always holds the three,
 * docs/checkpoints.md); trainer.default_local_dir is not empty (DF_EINVAL: the run would write
 * into the working directory and lose its first checkpoint), and trainer.resume_from_path is set
 * only with trainer.resume_mode=resume_path (DF_EINVAL: verl reads it in that mode alone, so the
 * run would not start from it). Messages name the key and where it was set.
 */
DF_API int df_config_check_outputs(const df_config *c, const df_config_list_ref *contents, int n);

/**
 * The compatibility classes applied to a loaded config: a DF_CFG_UNSUPPORTED key set to
 * anything but its default is DF_EUNSUPPORTED, naming the key, its value, where it was set
 * and its help; the DF_CFG_NO_EFFECT keys set to anything but their defaults are named in one
 * warning through `warn` (nothing when warn is NULL). A value counts as set when it comes
 * from the file, a workflow node or the command line (a derived default follows its source,
 * which is reported instead) and differs from the default once both are formatted.
 * Run by df_config_validate_train_ex and by `distflow sft`'s checks. DF_ENOMEM when out of memory.
 */
DF_API int df_config_check_compat(const df_config *c, df_warn_fn warn, void *user);

/**
 * Self-check of a schema table (used by tests): keys unique and well formed,
 * no key is also a group (`a.b` and `a.b.c`), a `*` only as an open group's
 * last component and only on a map entry, every default parses and is in
 * bounds, null_from names a key of the same type and is only used on nullable
 * entries. Returns 0 or DF_EINTERNAL naming the bad entry.
 */
DF_API int df_config_schema_check(const df_config_schema *s);

/**
 * Build a config: defaults, then `yaml_path` (NULL: defaults only), then the
 * overrides, then interpolation and derived defaults (see the file comment).
 * On success *out owns the result (free with df_config_free); on failure *out
 * is NULL and the status is DF_EINVAL (bad content), DF_EIO (unreadable file)
 * or DF_ENOMEM.
 */
DF_API int df_config_load(const df_config_schema *s, const char *yaml_path,
                          const char *const *overrides, int n_overrides, df_config **out);

/**
 * Same as df_config_load with the YAML given as text; `name` stands for the
 * file name in messages and df_config_where() (e.g. "checkpoint config").
 */
DF_API int df_config_load_text(const df_config_schema *s, const char *yaml_text,
                               const char *name, const char *const *overrides,
                               int n_overrides, df_config **out);

DF_API void df_config_free(df_config *c);

/** The schema the config was loaded with. */
DF_API const df_config_schema *df_config_get_schema(const df_config *c);

/* ---- typed getters (key must exist with that type; asserts otherwise) ---- */

/** Integer value. Asserts the value is not null (check df_config_is_null first). */
DF_API int64_t df_config_int(const df_config *c, const char *key);
/** Float value; also reads int keys (converted). Asserts not null. */
DF_API double df_config_float(const df_config *c, const char *key);
/** Boolean value. Asserts not null. */
DF_API bool df_config_bool(const df_config *c, const char *key);
/** String value, NULL when null. Owned by the config. Map keys: df_config_map_text. */
DF_API const char *df_config_str(const df_config *c, const char *key);
/**
 * Canonical flow-YAML text of a map key (`{}` when empty), NULL when null.
 * Owned by the config. Asserts the key is a DF_CFG_MAP key.
 */
DF_API const char *df_config_map_text(const df_config *c, const char *key);
/**
 * A map key's text (df_config_map_text, or the `const char *` of a typed
 * config's map field) as a JSON object, for mappings that code hands on as
 * data (data.apply_chat_template_kwargs: chat-template variables). Plain
 * scalars are typed as for any key: null / ~, true / false (yes / no / on /
 * off), integers, finite floats, else strings; quoted scalars are strings;
 * nested mappings are objects and lists arrays. *json is malloc'd compact
 * JSON, NULL when map_text is NULL (a null key).
 * Errors: DF_EINVAL (text that is not a mapping), DF_ENOMEM.
 */
DF_API int df_config_map_json(const char *map_text, char **json);
/** Item count of a list key (string or float list); 0 when null. */
DF_API int df_config_list_len(const df_config *c, const char *key);
/** i-th item of a string list (0 <= i < list_len). Owned by the config. */
DF_API const char *df_config_list_at(const df_config *c, const char *key, int i);
/** i-th item of a float list (0 <= i < list_len). */
DF_API double df_config_list_float_at(const df_config *c, const char *key, int i);
/** Whether the key's resolved value is null. */
DF_API bool df_config_is_null(const df_config *c, const char *key);

/**
 * Set `key` from YAML text (same parsing and checks as an override; a mapping
 * sets the keys of a group). Interpolations in the value resolve against the
 * current config at once; derived defaults of other keys are NOT recomputed
 * (they were fixed at load time). Returns DF_EINVAL with a message
 * "df_config_set: 'key=value': ..." and leaves the value unchanged on failure.
 */
DF_API int df_config_set(df_config *c, const char *key, const char *yaml_value);

/** Deep copy (same schema, values and origins). DF_ENOMEM. */
DF_API int df_config_copy(const df_config *c, df_config **out);

/**
 * A copy of `base` with `keys[i]` set to `values[i]` (YAML text, as the right
 * of a command-line `key=value`), checked exactly like command-line overrides:
 * the key must be in the schema (a group key takes a mapping), the value must
 * have the key's type, bounds and choices; interpolations resolve against the
 * copy. Derived defaults (null_from) of other keys are not recomputed. Each
 * overridden key's df_config_where() becomes `where` (e.g. "wf.yaml node
 * 'rollout_actor'"), and errors read "<where>: 'key=value': unknown key ...
 * (did you mean ...)". Used for per-node overrides of workflow files (siiRL
 * graph_updater merges a node's config over the global one).
 * Errors: DF_EINVAL (base untouched, *out NULL), DF_ENOMEM.
 */
DF_API int df_config_with_overrides(const df_config *base, const char *const *keys,
                                    const char *const *values, int n, const char *where,
                                    df_config **out);

/**
 * Where the value came from: "cfg.yaml:12" (file and line), "command line",
 * "default", "derived from <key>" (null_from), or "set by program"
 * (df_config_set). A key inside an open group that is not in the schema
 * (custom_reward_function.reward_kwargs.bonus) answers for the group's "<group>.*"
 * map (see "Open groups" above). Owned by the config.
 */
DF_API const char *df_config_where(const df_config *c, const char *key);

/** Whether someone chose `key`'s value (a file, the command line, the program): not a default and
 *  not derived from another key. The key must be in the schema. */
DF_API bool df_config_is_set(const df_config *c, const char *key);

/**
 * Write the resolved config as block YAML (nested mappings in schema order,
 * lists in flow style, strings quoted when needed), each value not from the
 * defaults followed by a `# <where>` comment; an open group's other keys are
 * written as keys of the group, after its typed keys. Loading the output with
 * the same schema gives the same values. Returns DF_EIO when writing fails.
 */
DF_API int df_config_dump(const df_config *c, FILE *f);
/**
 * The values someone chose: one line `<prefix><dotted.key>: <value>  # <where>`
 * (values formatted as df_config_dump does) for each key set in a file, on the
 * command line or by the program, in schema order; defaults and derived
 * defaults are left out; an open group's other keys one line each
 * (`custom_reward_function.reward_kwargs.bonus: 0.25`). prefix may be NULL. *n (may be NULL) receives the
 * number of lines. Errors: DF_EIO when writing fails, DF_ENOMEM.
 */
DF_API int df_config_dump_set(const df_config *c, const char *prefix, FILE *f, int *n);

/**
 * Cross-field checks of a `train` config for a run on `world_size`
 * data-parallel ranks, before anything is loaded (verl's
 * RayPPOTrainer._validate_config / check_mutually_exclusive and the batch
 * normalisation of its FSDP workers; distflow's data layout). Checks, in order:
 *  - data.train_batch_size divisible by world_size (each rank loads
 *    train_batch_size / world prompts, so train_batch_size x rollout.n is too);
 *  - deprecated global micro-batch keys (actor.ppo_micro_batch_size,
 *    rollout / ref log_prob_micro_batch_size; ref only when a KL term uses the
 *    reference) refused, "mutually exclusive"
 *    when the *_per_gpu key is set too; a *_per_gpu key null without dynamic
 *    batch size refused;
 *  - actor.ppo_mini_batch_size <= data.train_batch_size; ppo_mini_batch_size x
 *    rollout.n divisible by world_size; ppo_micro_batch_size_per_gpu divides
 *    that per-rank mini-batch (unless use_dynamic_bsz);
 *  - use_dynamic_bsz: ppo_max_token_len_per_gpu >= prompt_length +
 *    response_length; rollout.max_model_len (when set) >= the same sum;
 *  - adv_estimator gae: the same micro / mini rules for critic.*;
 *  - group estimators (grpo, rloo, opo, gpg, cpgd, ...) and
 *    algorithm.filter_groups.enable need rollout.n > 1;
 *  - adv_estimator, policy_loss.loss_mode, loss_agg_mode, kl_loss_type (when
 *    use_kl_loss) and algorithm.kl_penalty (when use_kl_in_reward) known to
 *    the algorithm registries (distflow/algo.h);
 *  - use_kl_loss and use_kl_in_reward not both true (verl only warns; a
 *    library cannot print, so distflow refuses);
 *  - clip_ratio_low / clip_ratio_high >= 0, clip_ratio_c > 1 (verl asserts);
 *  - val_kwargs: do_sample needs temperature > 0; n > 1 needs do_sample.
 *  - reward_model.reward_manager known to distflow/reward.h (naive, dapo);
 *    an unknown one is DF_EINVAL listing the known ones.
 * Returns 0, or DF_EINVAL for the first violation with a message naming each
 * key involved as `key=value (where)` (where: "file:line", "command line",
 * "default", ...) and why; also DF_EINVAL when `c` is not a train config or
 * world_size < 1.
 */
DF_API int df_config_validate_train(const df_config *c, int world_size);

/**
 * df_config_validate_train, plus warnings through `warn` (NULL: dropped;
 * each a sentence naming every key as `key=value (where)`) for settings that
 * are valid but probably not what was meant; each is sent before the errors
 * are checked, and none changes the result:
 *  - policy_loss.loss_mode=gspo with loss_agg_mode other than
 *    seq-mean-token-mean (GSPO's objective, Zheng et al. 2025, arXiv
 *    2507.18071 eq. 7, averages over sequences; verl's GSPO recipe sets it);
 *  - reward_model.overlong_buffer.enable with the naive reward manager
 *    (only dapo reads the buffer);
 *  - dapo with overlong_buffer.len >= data.max_response_length (every
 *    response is penalised; verl warns the same);
 *  - a non-empty reward_model.reward_kwargs (newer verl's spelling of the
 *    overlong buffer; distflow reads reward_model.overlong_buffer.*).
 */
DF_API int df_config_validate_train_ex(const df_config *c, int world_size, df_warn_fn warn,
                                       void *user);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_CONFIG_H */
