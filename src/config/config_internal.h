/*
 * Internals of the configuration layer (include/distflow/config.h).
 *
 *   schema.c        schema accessors, help printing, self-check
 *   schema_train.c  the `train` schema and df_train_config bindings, expanded from
 *                   include/distflow/train_config.def (siiRL / verl RL trainer keys)
 *   schema_sft.c    the same for `sft` (include/distflow/sft_config.def)
 *   typed.c         the typed-struct resolver (train_config.h, sft_config.h)
 *   scalar.c        YAML scalar parsing / formatting, edit-distance hints
 *   loader.c        libyaml walking, overrides, typed assignment
 *   config.c        df_config lifetime, resolution, getters, set, where
 *   map.c           DF_CFG_MAP values: canonical flow text, entry patching
 *   dump.c          df_config_dump
 *   validate_train.c  df_config_validate_train (cross-field checks)
 *   compat.c        df_config_check_compat (keys without effect, unsupported values)
 *   outputs.c       df_config_check_outputs (loggers, tensorboard_dir, checkpoint contents)
 */
#ifndef DF_CONFIG_INTERNAL_H
#define DF_CONFIG_INTERNAL_H

#include <math.h>
#include <stddef.h>

#include "distflow/config.h"
#include "util/sbuf.h"

/* C representation of a key's field in a typed config struct (train_config.h). */
typedef enum {
    CFG_C_NONE = 0, /* no typed struct (ad-hoc test schemas) */
    CFG_C_BOOL,
    CFG_C_INT,
    CFG_C_FLOAT,
    CFG_C_STR, /* const char *: strings, choices and maps; NULL when null */
    CFG_C_STRS,
    CFG_C_FLOATS,
    CFG_C_OPT_INT,
    CFG_C_OPT_FLOAT,
    CFG_C_OPT_BOOL,
} cfg_ctype;

/* The cfg_ctype of a field expression, chosen by its C type (unevaluated). */
#define CFG_CTYPE_OF(x)                                                                                      \
    _Generic((x), bool: CFG_C_BOOL, int64_t: CFG_C_INT, double: CFG_C_FLOAT, const char *: CFG_C_STR,          \
             df_config_strs: CFG_C_STRS, df_config_floats: CFG_C_FLOATS, df_config_opt_int: CFG_C_OPT_INT,      \
             df_config_opt_float: CFG_C_OPT_FLOAT, df_config_opt_bool: CFG_C_OPT_BOOL)

/* Whether a field of C type ct can hold a key of schema type kind: the value
 * type matches, and an optional field only for a nullable key (a nullable key
 * with a plain field must be a derived default; cfg_resolve_typed refuses a
 * null left there). A constant expression, checked by _Static_assert. */
#define CFG_KIND_FITS(kind, ct, nullable)                                                                    \
    (((kind) == DF_CFG_BOOL && ((ct) == CFG_C_BOOL || ((ct) == CFG_C_OPT_BOOL && (nullable)))) ||              \
     ((kind) == DF_CFG_INT && ((ct) == CFG_C_INT || ((ct) == CFG_C_OPT_INT && (nullable)))) ||                 \
     ((kind) == DF_CFG_FLOAT && ((ct) == CFG_C_FLOAT || ((ct) == CFG_C_OPT_FLOAT && (nullable)))) ||           \
     (((kind) == DF_CFG_STR || (kind) == DF_CFG_MAP) && (ct) == CFG_C_STR) ||                                 \
     ((kind) == DF_CFG_STR_LIST && (ct) == CFG_C_STRS) || ((kind) == DF_CFG_FLOAT_LIST && (ct) == CFG_C_FLOATS))

/* Entry i's field in the typed struct: byte offset, size, C type. */
typedef struct {
    size_t offset, size;
    cfg_ctype ctype;
} cfg_binding;

struct df_config_schema {
    const char *name;
    const df_config_entry *entries;
    int n;
    const cfg_binding *bind; /* [n], parallel to entries; NULL: no typed struct */
    size_t struct_size;      /* sizeof the typed struct */
    const unsigned char *compat; /* [n] df_config_compat, parallel to entries; NULL: all effective */
};

/* ---- one-line entries for ad-hoc schemas (tests); the real tables are
 * include/distflow/{train,sft}_config.def ----
 * Bounds are inclusive doubles, INF for open ends. KF_FROM: nullable, default null, which
 * resolves to key `from` after loading. */
#define INF INFINITY
#define KI(k, d, lo, hi, h) {k, DF_CFG_INT, false, d, lo, hi, 0, NULL, NULL, h}
#define KF_FROM(k, from, lo, hi, h) {k, DF_CFG_FLOAT, true, "null", lo, hi, 0, NULL, from, h}

/* ---- values ---- */

typedef struct {
    bool is_null;
    bool b;
    int64_t i;
    double f;
    char *s;        /* DF_CFG_STR; DF_CFG_MAP: canonical flow YAML */
    char **items;   /* DF_CFG_STR_LIST */
    double *fitems; /* DF_CFG_FLOAT_LIST */
    int n_items;
} cfg_value;

enum { CFG_PENDING = 0, CFG_RESOLVING = 1, CFG_DONE = 2 };

typedef struct {
    cfg_value v;
    char *raw;     /* unresolved text holding `${...}`, NULL when none */
    char *where;   /* "cfg.yaml:12", "command line", "default", ... */
    int file_line; /* >0: set by the YAML file at this line (duplicate check) */
    int state;     /* CFG_PENDING until interpolation / null_from resolved */
    char **subs;   /* an open group's map: [2 * n_subs] name, where of each top-level name set (the last) */
    int n_subs;
} cfg_slot;

struct df_config {
    const df_config_schema *schema;
    cfg_slot *slots; /* one per schema entry, same order */
};

/* Where an assignment comes from, for messages and df_config_where(). */
typedef struct {
    const char *file;  /* set: places are "<file>:<line>" of the node; else `place` */
    const char *place; /* fixed message prefix, e.g. "command line: 'k=v'" */
    const char *where; /* recorded origin; NULL: the node's "<file>:<line>" */
    bool in_file;      /* check duplicate keys */
    bool no_interp;    /* take `${` literally (text produced by resolution) */
} cfg_src;

/* ---- config.c ---- */

/* Set by the user (the file, a workflow node, the command line): neither the schema's default nor a
   value derived from another key (that key's slot tells). */
bool cfg_slot_user_set(const cfg_slot *s);

/* Record that top-level `name` of an open group's map was set at `where` (cfg_slot.subs). DF_ENOMEM. */
int cfg_slot_note_sub(cfg_slot *s, const char *name, size_t n, const char *where);
/* Where top-level `name` (n bytes) of an open group's map was set; the slot's where when not noted. */
const char *cfg_slot_sub_where(const cfg_slot *s, const char *name, size_t n);

/* ---- scalar.c ---- */


bool cfg_is_null_text(const char *s, bool plain);
/* 0 ok, -1 not that type, -2 out of range */
int cfg_parse_bool(const char *s, bool *out);
int cfg_parse_int(const char *s, int64_t *out);
int cfg_parse_float(const char *s, double *out);
/* Shortest text that reads back to exactly `x` (".inf" style for infinities). */
void cfg_format_float(double x, char *buf, size_t cap);
/* A string as a YAML scalar: plain when unambiguous, else double-quoted. */
void cfg_quote(df_sbuf *b, const char *s);
/* The value as YAML text (flow lists). */
void cfg_format_value(df_sbuf *b, const df_config_entry *e, const cfg_value *v);
/* Short human text for messages: "abc" quoted and cut at 60 bytes. */
void cfg_show_text(const char *s, char *buf, size_t cap);

/* Optimal-string-alignment edit distance (transposition = 1). */
int cfg_edit_distance(const char *a, size_t na, const char *b, size_t nb);
/* Closest key or group of `s` to `key`, written to buf; false when none close. */
bool cfg_suggest_key(const df_config_schema *s, const char *key, char *buf, size_t cap);
/* Closest of the "a|b|c" choices to `text`; false when none close. */
bool cfg_suggest_choice(const char *choices, const char *text, char *buf, size_t cap);
bool cfg_choice_ok(const char *choices, const char *text);

/* ---- schema.c ---- */
int cfg_find(const df_config_schema *s, const char *key);
/* Whether some key lies under `key` ("data" for "data.seed"). */
bool cfg_is_group(const df_config_schema *s, const char *key);
/* An open group's "<group>.*" entry (DFK_OPEN): a DF_CFG_MAP holding the group's other keys. */
bool cfg_is_open(const df_config_entry *e);
/* Index of the open entry whose map takes `key` ("g.x" or "g.x.y" for the entry "g.*", where
 * "g.x" is neither a key nor a group of the schema), or -1. */
int cfg_open_owner(const df_config_schema *s, const char *key);
/* "an integer", "a list of strings", ... for messages. */
const char *cfg_type_desc(df_config_type t);
/* "[lo, hi]", ">= lo", "<= hi", or "" when unbounded. */
void cfg_bounds_text(const df_config_entry *e, char *buf, size_t cap);

/* ---- loader.c ---- */
/* Parse `text` as one YAML value and assign it to slot `idx` (or, when `idx`
 * is -1, apply it at `key`, which may be a group taking a mapping). */
int cfg_assign_text(df_config *c, int idx, const char *key, const char *text, const cfg_src *src);
/* Parse a whole YAML document and apply its mappings. */
int cfg_apply_document(df_config *c, const char *text, size_t len, const char *name);
/* Apply one `key=value` command-line override. */
int cfg_apply_override(df_config *c, const char *arg);
/* Check null / bounds / choices / length of a built value against its entry. */
int cfg_check(const df_config_entry *e, const cfg_value *v, const char *place);

/* ---- map.c (DF_CFG_MAP values) ---- */
struct yaml_document_s;
struct yaml_node_s;
/* Canonical flow-YAML text of node `map` (any node kind) into *out (malloc'd). */
int cfg_map_text(struct yaml_document_s *doc, struct yaml_node_s *map, const char *place, char **out);
/* `old` (canonical map text; NULL: null) with the entry at dotted path `sub`
 * set to node `val` of `vdoc`; missing or non-mapping steps become mappings. */
int cfg_map_patch(const char *old, const char *sub, struct yaml_document_s *vdoc, struct yaml_node_s *val,
                  const char *place, char **out);

/* Call fn(user, key, value) for each top-level entry of mapping text `text` (canonical
 * map text), key and value as canonical flow YAML (a key quoted when it needs it); stops at
 * fn's first non-zero result and returns it. DF_EINTERNAL when the text does not parse. */
int cfg_map_each(const char *text, int (*fn)(void *user, const char *key, const char *value), void *user);

/* ---- config.c ---- */
void cfg_value_clear(cfg_value *v);
/* Replace slot idx's value (takes ownership of v, raw; copies where). */
int cfg_commit(df_config *c, int idx, cfg_value *v, char *raw, const char *where);
int cfg_resolve(df_config *c);

/* ---- typed.c ---- */
/* Fill the typed struct `out` (s->struct_size bytes) from c, which must have schema s. */
int cfg_resolve_typed(const df_config *c, const df_config_schema *s, void *out);

#endif /* DF_CONFIG_INTERNAL_H */
