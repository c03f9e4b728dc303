/*
 * distflow/train_config.h -- the `distflow train` configuration as one typed
 * struct, generated from the key table distflow/train_config.def.
 *
 *   df_train_config t;
 *   if (df_train_config_resolve(cfg, &t) == DF_OK)
 *       use(t.algorithm.gamma, t.actor_rollout_ref.actor.optim.lr);
 *
 * Layers. A df_config (distflow/config.h) is the loading layer: the YAML file,
 * the command line, interpolations, derived defaults, a node's overrides, and
 * where each value came from (df_config_where) for messages. Code that *uses*
 * the configuration reads a df_train_config instead: resolved once (per
 * workflow node, for a node with overrides) and passed down. A field exists
 * for every key and only for keys in the table, so a misspelt key is a
 * compile error, not the silent 0 a string lookup gave in a Release build.
 *
 * Shape. The struct nests as the YAML does: the key
 * `actor_rollout_ref.actor.policy_loss.loss_mode` is the field
 * cfg.actor_rollout_ref.actor.policy_loss.loss_mode. Each group is a
 * `struct df_train_<group path without actor_rollout_ref>` (e.g.
 * struct df_train_actor, struct df_train_rollout_val_kwargs); the two optimizer
 * blocks (actor_rollout_ref.actor.optim, critic.optim) share struct
 * df_train_optim. What a key means, its default and bounds: its line in the
 * table, `distflow config help KEY`, docs/configuration.md.
 *
 * Field types (distflow/config.h):
 *   bool / int64_t / double      a key that is never null after loading
 *                                (plain keys, and derived defaults whose
 *                                source is never null, e.g. clip_ratio_low)
 *   df_config_opt_int / _float / _bool   a nullable key: .set false when null
 *   const char *                 a string or choice key (choices stay strings;
 *                                the loader has checked them), NULL when null;
 *                                a map key: its canonical flow-YAML text
 *   df_config_strs / df_config_floats   lists
 * Lifetime: strings and lists point into the df_config the struct was
 * resolved from; the struct is valid while that config lives and is not
 * changed (df_config_set). The struct holds no other pointers and needs no
 * freeing; copying it is a plain assignment.
 *
 * Derived values (the actor's temperature from its rollout node, the
 * mini-batch sizes in samples, the optimizer's schedule steps, ...) are not
 * here: they need the workflow and the data, and the DAG worker resolves them
 * once at setup (src/workers/dag/resolve.c).
 *
 * Design choices.
 *  - The table is an include file (an "X-macro include") rather than one
 *    macro: it is long, carries comments, and includes the optimizer block
 *    twice; each includer defines DF_CFG_KEY / _GROUP / _END / _BLOCK to get
 *    the struct (this header), the schema entries and the resolver bindings
 *    (src/config/schema_train.c).
 *  - An entry names its group path and leaf (`actor_rollout_ref.actor,
 *    clip_ratio`); the key string is their spelling, the field is
 *    `group.leaf`, its offset offsetof(df_train_config, group.leaf). A key
 *    and its field cannot disagree, and the resolver walks the table once.
 *  - Choice keys stay strings: the loader has checked them against the
 *    table's choices, and the algorithm registries look names up by string
 *    (a plugin's estimator is a name the table cannot list).
 *  - Nullable scalars are explicit optional types instead of sentinels, so
 *    reading one as a plain number does not compile.
 *  - Strings are borrowed, not copied: the struct is a plain value (no free),
 *    and a workflow node's struct borrows from the node's own merged config.
 */
#ifndef DISTFLOW_TRAIN_CONFIG_H
#define DISTFLOW_TRAIN_CONFIG_H

#include "distflow/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Struct generation: a key is a field of its C type; a group a nested struct. */
#define DF_CFG_KEY(path, leaf, key, kind, ctype, ...) ctype leaf DF_CFG_AUDIT_ATTR("train", key);
#define DF_CFG_GROUP(leaf, tag) struct tag {
#define DF_CFG_END(leaf) } leaf;
#define DF_CFG_BLOCK(group, leaf, tag) struct tag leaf;
#define DF_CFG_EXPAND_BLOCKS 0

/** An optimizer block: actor_rollout_ref.actor.optim.* and critic.optim.* (siiRL OptimizerArguments). */
struct df_train_optim {
#include "distflow/config_table_begin.h"
#include "distflow/train_optim.def"
#include "distflow/config_table_end.h"
};

/** Every `distflow train` key, nested as in the YAML (see the file comment). */
typedef struct df_train_config {
#include "distflow/train_config.def"
} df_train_config;

#undef DF_CFG_KEY
#undef DF_CFG_GROUP
#undef DF_CFG_END
#undef DF_CFG_BLOCK
#undef DF_CFG_EXPAND_BLOCKS

/**
 * Fill *out from `c` (a config loaded with df_config_schema_train(), e.g. by
 * df_config_load or df_config_with_overrides) in one pass over the table:
 * every field from its key's resolved value. Strings and lists are borrowed
 * from `c` (see the file comment). On failure *out is zeroed.
 * Errors: DF_EINVAL when `c` was not loaded with the train schema, or when a
 * key whose field has a plain type is null (possible only where a node's
 * override sets a derived-default key to null: "<where>: <key> is null ...").
 */
DF_API int df_train_config_resolve(const df_config *c, df_train_config *out);

/**
 * Whether algorithm.rollout_correction corrects at the advantage node (verl's decoupled mode):
 * rollout_is or rollout_rs set and bypass_mode false (bypass mode corrects in the loss). Then the
 * advantage needs old_log_probs before it.
 */
DF_API bool df_train_rollout_correction_decoupled(const df_train_config *t);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_TRAIN_CONFIG_H */
