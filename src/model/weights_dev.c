/* A model's weights in a backend's memory (weights_dev.h). */
#include "model/weights_dev.h"

#include <stdlib.h>
#include <string.h>

void df_weights_dev_free(df_weights_dev *d)
{
    if (!d)
        return;
    if (d->blob)
        d->be.ops->release(d->be.ctx, d->blob);
    free(d->layers);
    memset(d, 0, sizeof *d);
}

bool df_weights_dev_current(const df_weights_dev *d, const df_model *m)
{
    return d->blob && d->n_params == m->n_params && d->version == m->version;
}

int df_weights_dev_sync(df_weights_dev *d, const df_backend *be, const df_model *m, bool force)
{
    const size_t bytes = (size_t)m->n_params * sizeof(float);
    if (!d->blob || d->n_params != m->n_params) {
        df_weights_dev_free(d);
        d->be = *be;
        d->layers = calloc((size_t)m->cfg.num_hidden_layers, sizeof(df_layer_view));
        int rc = d->layers ? be->ops->alloc(be->ctx, bytes, (void **)&d->blob)
                           : df_error(DF_ENOMEM, "out of memory");
        if (rc) {
            df_weights_dev_free(d);
            return df_error_wrap(rc, "the model's weights on the %s backend (%lld parameters)",
                                 be->ops->name, (long long)m->n_params);
        }
        d->n_params = m->n_params;
        d->view.layers = d->layers;
        df_model_view_of(m, d->blob, &d->view);
        force = true;
    }
    if (!force && d->version == m->version)
        return DF_OK;
    int rc = d->be.ops->upload(d->be.ctx, d->blob, m->params, bytes);
    if (rc)
        return df_error_wrap(rc, "uploading the model's weights to the %s backend", be->ops->name);
    d->version = m->version;
    return DF_OK;
}
