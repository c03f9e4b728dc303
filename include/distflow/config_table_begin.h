/*
 * distflow/config_table_begin.h -- the entry forms of the configuration tables
 * (distflow/train_config.def, distflow/sft_config.def). Not a header to include
 * by itself: a table includes it first and distflow/config_table_end.h last,
 * and the includer defines DF_CFG_KEY, DF_CFG_GROUP, DF_CFG_END, DF_CFG_BLOCK
 * and DF_CFG_EXPAND_BLOCKS (see distflow/train_config.h for what each does).
 * Every form expands to
 *   DF_CFG_KEY(member path, leaf, "dotted.key", schema type (a df_config_type),
 *              C type of the field, nullable, default YAML text, min, max,
 *              list length, choices, null_from, help)
 * The member path is the YAML key itself (`actor_rollout_ref.actor.optim.lr`),
 * so the key string, the struct member and offsetof() come from one spelling.
 * No include guard: it is included once per table expansion.
 */
/* ---- one-line entry forms (local to this file; undefined at its end) ----
 * DFK_<type>(group, leaf, default YAML text, [min, max,] help); a 0 suffix is a top-level key.
 *   B bool, I int, F float, S string, E string with choices (EN: or null), L string list,
 *   LE string list with item choices, FL float list (item count, item bounds), M free-form map;
 *   N: nullable (the field is a df_config_opt_* or a NULL string / null list).
 * DFK_<type>_FROM(group, leaf, source key, ...): default null, which resolves to the source key's
 *   value after loading (verl's derived defaults); the field has the plain type (the resolver
 *   refuses a null left there), except DFK_IN_FROM, whose source may itself be null (a string's may be
 *   too). DFK_E_FROM takes the choices after the source. Classed DFK_UNSUPPORTED, a _FROM key is verl's
 *   copy of its source: accepted while it equals the source's value, refused otherwise.
 * DFK_OPEN(group, help): the group takes keys of any other name too, with any YAML value (verl's
 *   free-form kwargs dicts beside distflow's typed keys). Its entry is the DF_CFG_MAP key
 *   "<group>.*", whose map collects those keys (the field `extra`, its canonical flow YAML); put it
 *   after the group's keys. */
/* DFK_NO_EFFECT(entry) / DFK_UNSUPPORTED(entry): the entry's df_config_compat class (distflow/config.h).
 * Includers that need the class define DF_CFG_COMPAT(class, ...) (the expanded entry follows the class);
 * for the others it is the entry. */
#ifndef DF_CFG_COMPAT
#define DF_CFG_COMPAT(cls, ...) __VA_ARGS__
#define DFK_COMPAT_LOCAL_
#endif
#define DFK_NO_EFFECT(entry) DF_CFG_COMPAT(DF_CFG_NO_EFFECT, entry)
#define DFK_UNSUPPORTED(entry) DF_CFG_COMPAT(DF_CFG_UNSUPPORTED, entry)
#define DFK_STR_(x) #x
#define DFK_STR(x) DFK_STR_(x)
#define DFK_INF INFINITY
#define DFK_KEY(g, k) g.k, k, DFK_STR(g) "." #k
/* expands DFK_KEY before DF_CFG_KEY splits its arguments */
#define DFK_CALL(...) DF_CFG_KEY(__VA_ARGS__)
#define DFK_B(g, k, d, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_BOOL, bool, 0, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_I(g, k, d, lo, hi, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_INT, int64_t, 0, d, lo, hi, 0, NULL, NULL, h)
#define DFK_IN(g, k, d, lo, hi, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_INT, df_config_opt_int, 1, d, lo, hi, 0, NULL, NULL, h)
#define DFK_F(g, k, d, lo, hi, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_FLOAT, double, 0, d, lo, hi, 0, NULL, NULL, h)
#define DFK_FN(g, k, d, lo, hi, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_FLOAT, df_config_opt_float, 1, d, lo, hi, 0, NULL, NULL, h)
#define DFK_S(g, k, d, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_STR, const char *, 0, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_SN(g, k, d, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_STR, const char *, 1, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_E(g, k, d, ch, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_STR, const char *, 0, d, -DFK_INF, DFK_INF, 0, ch, NULL, h)
#define DFK_EN(g, k, d, ch, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_STR, const char *, 1, d, -DFK_INF, DFK_INF, 0, ch, NULL, h)
#define DFK_L(g, k, d, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_STR_LIST, df_config_strs, 0, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_LN(g, k, d, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_STR_LIST, df_config_strs, 1, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_LE(g, k, d, ch, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_STR_LIST, df_config_strs, 0, d, -DFK_INF, DFK_INF, 0, ch, NULL, h)
#define DFK_FL(g, k, d, n, lo, hi, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_FLOAT_LIST, df_config_floats, 0, d, lo, hi, n, NULL, NULL, h)
#define DFK_M(g, k, d, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_MAP, const char *, 1, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_OPEN(g, h) \
    DFK_CALL(g.extra, extra, DFK_STR(g) ".*", DF_CFG_MAP, const char *, 0, "{}", -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_B_FROM(g, k, from, h) \
    DFK_CALL(DFK_KEY(g, k), DF_CFG_BOOL, bool, 1, "null", -DFK_INF, DFK_INF, 0, NULL, DFK_STR(from), h)
#define DFK_I_FROM(g, k, from, lo, hi, h) \
    DFK_CALL(DFK_KEY(g, k), DF_CFG_INT, int64_t, 1, "null", lo, hi, 0, NULL, DFK_STR(from), h)
#define DFK_IN_FROM(g, k, from, lo, hi, h) \
    DFK_CALL(DFK_KEY(g, k), DF_CFG_INT, df_config_opt_int, 1, "null", lo, hi, 0, NULL, DFK_STR(from), h)
#define DFK_F_FROM(g, k, from, lo, hi, h) \
    DFK_CALL(DFK_KEY(g, k), DF_CFG_FLOAT, double, 1, "null", lo, hi, 0, NULL, DFK_STR(from), h)
#define DFK_E_FROM(g, k, from, ch, h) \
    DFK_CALL(DFK_KEY(g, k), DF_CFG_STR, const char *, 1, "null", -DFK_INF, DFK_INF, 0, ch, DFK_STR(from), h)
#define DFK_BN(g, k, d, h) DFK_CALL(DFK_KEY(g, k), DF_CFG_BOOL, df_config_opt_bool, 1, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_S_FROM(g, k, from, h) \
    DFK_CALL(DFK_KEY(g, k), DF_CFG_STR, const char *, 1, "null", -DFK_INF, DFK_INF, 0, NULL, DFK_STR(from), h)
#define DFK_I0(k, d, lo, hi, h) DF_CFG_KEY(k, k, #k, DF_CFG_INT, int64_t, 0, d, lo, hi, 0, NULL, NULL, h)
#define DFK_B0(k, d, h) DF_CFG_KEY(k, k, #k, DF_CFG_BOOL, bool, 0, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
#define DFK_M0(k, d, h) DF_CFG_KEY(k, k, #k, DF_CFG_MAP, const char *, 1, d, -DFK_INF, DFK_INF, 0, NULL, NULL, h)
/* fsdp_config dtypes (verl's PrecisionType names): what distflow computes / stores in, and the
 * help of every role's mixed_precision.param_dtype (train's actor, ref, critic; sft's model) */
#define DFK_MP_PARAM "bf16|bfloat16|fp32|float32"
#define DFK_MP_PARAM_HELP \
    "compute dtype of the decoder's matmuls (verl's FSDP MixedPrecision, default bf16): bf16 multiplies bfloat16 operands with float32 accumulation from a bf16 copy of the weights refreshed once per optimizer step (the layers' projections and the LM head's logits); norms, attention, log-softmax, log-probs, losses and reductions stay float32 (docs/mixed_precision.md). Where the CPU has no native bf16 kernels (AMX / AVX512-BF16) one notice says so and float32 is used"
