/*
 * The typed-struct resolver (distflow/train_config.h, sft_config.h): one pass
 * over a schema's entries, copying each resolved value to its field through
 * the bindings expanded from the same table (schema_train.c, schema_sft.c).
 */
#include "config/config_internal.h"

#include <string.h>

int cfg_resolve_typed(const df_config *c, const df_config_schema *s, void *out)
{
    memset(out, 0, s->struct_size);
    if (!c || c->schema != s)
        return df_error(DF_EINVAL, "resolving the typed %s config: the config was not loaded with the %s schema",
                        s->name, s->name);
    for (int i = 0; i < s->n; i++) {
        const df_config_entry *e = &s->entries[i];
        const cfg_binding *b = &s->bind[i];
        const cfg_value *v = &c->slots[i].v;
        char *f = (char *)out + b->offset;
        bool plain = b->ctype == CFG_C_BOOL || b->ctype == CFG_C_INT || b->ctype == CFG_C_FLOAT;
        if (plain && v->is_null) {
            memset(out, 0, s->struct_size);
            return df_error(DF_EINVAL, "%s: %s=null: this key needs a value (null only as its default, which takes %s's)",
                            c->slots[i].where, e->key, e->null_from ? e->null_from : "another key");
        }
        /* field by field through typed pointers (f is the field's own, aligned
           address), so no padding byte is written: an unchanged key leaves its
           bytes as they were (test_config_typed compares them) */
        switch (b->ctype) {
        case CFG_C_BOOL: *(bool *)f = v->b; break;
        case CFG_C_INT: *(int64_t *)f = v->i; break;
        case CFG_C_FLOAT: *(double *)f = v->f; break;
        case CFG_C_STR: *(const char **)f = v->is_null ? NULL : v->s; break;
        case CFG_C_STRS: {
            df_config_strs *l = (df_config_strs *)f;
            l->items = v->is_null ? NULL : (const char *const *)v->items;
            l->n = v->is_null ? 0 : v->n_items;
            l->null = v->is_null;
            break;
        }
        case CFG_C_FLOATS: {
            df_config_floats *l = (df_config_floats *)f;
            l->items = v->is_null ? NULL : v->fitems;
            l->n = v->is_null ? 0 : v->n_items;
            break;
        }
        case CFG_C_OPT_INT: {
            df_config_opt_int *o = (df_config_opt_int *)f;
            o->set = !v->is_null;
            o->v = v->is_null ? 0 : v->i;
            break;
        }
        case CFG_C_OPT_FLOAT: {
            df_config_opt_float *o = (df_config_opt_float *)f;
            o->set = !v->is_null;
            o->v = v->is_null ? 0 : v->f;
            break;
        }
        case CFG_C_OPT_BOOL: {
            df_config_opt_bool *o = (df_config_opt_bool *)f;
            o->set = !v->is_null;
            o->v = v->is_null ? false : v->b;
            break;
        }
        case CFG_C_NONE: return df_error(DF_EINTERNAL, "schema %s has no typed struct", s->name);
        }
    }
    return DF_OK;
}
