/* model/optimizer.c: AdamW, schedule and clipping (semantics: docs/model.md). */
#include "model/optimizer.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int adamw_create(AdamW *o, const Model *m, MhaError *err) {
    size_t bytes = m->lay.total * sizeof(float);
    o->t = 0;
    o->m = m->be->alloc(bytes);
    o->v = m->be->alloc(bytes);
    o->tensors = calloc((size_t)m->lay.n, sizeof *o->tensors);
    o->stats = m->be->alloc(2 * sizeof(double));
    o->grad_scale = m->be->alloc(sizeof(float));
    o->pending = 0;
    if (!o->m || !o->v || !o->tensors || !o->stats || !o->grad_scale) {
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
    if (o->stats) m->be->free(o->stats);
    if (o->grad_scale) m->be->free(o->grad_scale);
    o->m = o->v = NULL;
    o->stats = NULL;
    o->grad_scale = NULL;
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

void adamw_begin(AdamW *o, const Model *m) { m->be->zero(o->stats, sizeof(double)); }

void adamw_queue(AdamW *o, Model *m, const Config *c, float lr) {
    if (o->pending) {
        fprintf(stderr, "mha: internal error: adamw_queue before the outcome of the previous update\n");
        abort();
    }
    const Backend *be = m->be;
    /* clipping as torch's clip_grad_norm_ (g *= scale), applied inside the AdamW pass */
    be->grad_norm(o->stats, o->grad_scale, m->grads, m->lay.total, c->clip_norm);
    o->t++;   /* taken unless adamw_outcome finds it skipped */
    for (int k = 0; k < m->lay.n; k++) {
        const ParamInfo *p = &m->lay.t[k];
        o->tensors[k] = (AdamwTensor){p->offset, p->numel, p->decay ? c->weight_decay : 0.0f};
    }
    be->adamw(m->params, m->grads, o->m, o->v, o->tensors, m->lay.n, lr, c->beta1, c->beta2, c->adam_eps,
              o->grad_scale, o->t);
    be->to_host_async(o->read, o->stats, sizeof o->read);
    o->pending = 1;
}

int adamw_outcome(AdamW *o, const Model *m, double *loss_sum, double *grad_norm) {
    if (!o->pending) {
        fprintf(stderr, "mha: internal error: adamw_outcome without an update queued\n");
        abort();
    }
    m->be->to_host_wait();
    o->pending = 0;
    if (loss_sum) *loss_sum = o->read[0];
    if (grad_norm) *grad_norm = sqrt(o->read[1]);
    /* the device's decision (Backend.grad_norm), taken again from the same numbers */
    int skipped = !isfinite(mha_grad_scale(o->read[0], o->read[1], 0.0f));
    if (skipped) o->t--;
    return skipped;
}

int adamw_step(AdamW *o, Model *m, const Config *c, float lr, double *grad_norm) {
    adamw_begin(o, m);
    adamw_queue(o, m, c, lr);
    return adamw_outcome(o, m, NULL, grad_norm);
}
