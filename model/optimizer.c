/* model/optimizer.c: AdamW, schedule and clipping (semantics: docs/model.md). */
#include "model/optimizer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int adamw_create(AdamW *o, const Model *m, MhaError *err) {
    size_t bytes = m->lay.total * sizeof(float);
    o->t = 0;
    o->m = m->be->alloc(bytes);
    o->v = m->be->alloc(bytes);
    o->tensors = calloc((size_t)m->lay.n, sizeof *o->tensors);
    if (!o->m || !o->v || !o->tensors) {
        adamw_destroy(o, m);
        return mha_fail(err, MHA_EXIT_DATA, "%s backend: out of memory allocating %.1f MiB of AdamW state",
                        m->be->name, 2.0 * bytes / 1048576.0);
    }
    m->be->zero(o->m, bytes);
    m->be->zero(o->v, bytes);
    return 0;
}

void adamw_destroy(AdamW *o, const Model *m) {
    if (o->m) m->be->free(o->m);
    if (o->v) m->be->free(o->v);
    o->m = o->v = NULL;
    free(o->tensors);
    o->tensors = NULL;
}

long schedule_warmup(float warmup, long total) {
    if (warmup < 1.0f) return lround((double)warmup * (double)total);
    return (long)warmup;
}

float schedule_lr(const Config *c, long u, long total) {
    long w = schedule_warmup(c->warmup, total);
    if (u < w) return c->lr * (float)(u + 1) / (float)w;
    double p = (double)(u - w) / (double)(total - w > 1 ? total - w : 1);
    if (p > 1.0) p = 1.0;
    double r = c->min_lr_ratio, f = 1.0;
    if (strcmp(c->decay, "linear") == 0) f = r + (1.0 - r) * (1.0 - p);
    else if (strcmp(c->decay, "cosine") == 0) f = r + (1.0 - r) * 0.5 * (1.0 + cos(M_PI * p));
    return (float)(c->lr * f);
}

int adamw_step(AdamW *o, Model *m, const Config *c, float lr, double *grad_norm) {
    const Backend *be = m->be;
    double norm = sqrt(be->sum_squares(m->grads, m->lay.total));
    if (grad_norm) *grad_norm = norm;
    if (!isfinite(norm)) return 1;
    /* clipping as torch's clip_grad_norm_ (g *= scale), applied inside the AdamW pass */
    float grad_scale = 1.0f;
    if (c->clip_norm > 0.0f && norm > c->clip_norm) grad_scale = (float)(c->clip_norm / (norm + 1e-6));
    o->t++;
    for (int k = 0; k < m->lay.n; k++) {
        const ParamInfo *p = &m->lay.t[k];
        o->tensors[k] = (AdamwTensor){p->offset, p->numel, p->decay ? c->weight_decay : 0.0f};
    }
    be->adamw(m->params, m->grads, o->m, o->v, o->tensors, m->lay.n, lr, c->beta1, c->beta2, c->adam_eps,
              grad_scale, o->t);
    return 0;
}
