/*
 * The output settings `train` and `sft` share (config.h, df_config_check_outputs): trainer.logger's
 * names, trainer.tensorboard_dir without the logger that reads it, and the checkpoint contents lists.
 */
#include "config/config_internal.h"

#include "logging/loggers.h"

#include <stdio.h>
#include <string.h>

/* Slot i's string list as a typed list. */
static df_config_strs strs_of(const df_config *c, int i)
{
    const cfg_value *v = &c->slots[i].v;
    return (df_config_strs){.items = (const char *const *)v->items, .n = v->n_items, .null = v->is_null};
}

int df_config_check_outputs(const df_config *c, const df_config_list_ref *contents, int n)
{
    const df_config_schema *s = c->schema;
    int lg = cfg_find(s, "trainer.logger"), tb = cfg_find(s, "trainer.tensorboard_dir");
    int rc = DF_OK;
    if (lg >= 0) {
        df_config_strs names = strs_of(c, lg);
        char where[300];
        snprintf(where, sizeof where, "trainer.logger (%s)", c->slots[lg].where);
        rc = df_loggers_check_names(names.items, names.n, where);
        const char *dir = tb >= 0 ? c->slots[tb].v.s : NULL;
        if (!rc && dir && !df_config_strs_has(&names, "tensorboard"))
            rc = df_error(DF_EINVAL, "trainer.tensorboard_dir='%s' (%s): trainer.logger has no tensorboard, so no "
                          "event file would be written", dir, c->slots[tb].where);
    }
    /* a checkpoint always holds the model, the optimizer and the extra state (docs/checkpoints.md) */
    for (int i = 0; i < n && !rc; i++) {
        const df_config_strs *l = contents[i].list;
        if (!df_config_strs_has(l, "model") || !df_config_strs_has(l, "optimizer") || !df_config_strs_has(l, "extra"))
            rc = df_error(DF_EUNSUPPORTED, "%s (%s): a distflow checkpoint always holds model, optimizer and extra "
                          "(and the Hugging Face weights); the list must name all three (docs/checkpoints.md)",
                          contents[i].key, df_config_where(c, contents[i].key));
    }
    return rc;
}
