/* model/optimizer.h: AdamW with decoupled weight decay, the learning-rate schedule
 * (linear warmup, then linear / cosine / no decay) and clipping by global norm. */
#ifndef MHA_MODEL_OPTIMIZER_H
#define MHA_MODEL_OPTIMIZER_H

#include "model/classifier.h"
#include "model/config.h"

typedef struct {
    float *m, *v;           /* (lay.total) first and second moments, backend memory */
    int t;                  /* updates taken (AdamW's step count) */
    AdamwTensor *tensors;   /* (lay.n) the parameter tensors, for Backend.adamw (host memory) */
} AdamW;

int adamw_create(AdamW *o, const Model *m, MhaError *err);
void adamw_destroy(AdamW *o, const Model *m);

/* Warmup length in updates: warmup < 1 is a fraction of total (rounded), else a count. */
long schedule_warmup(float warmup, long total);
/* Learning rate of update u (0-based) out of total (docs/model.md). */
float schedule_lr(const Config *c, long u, long total);

/* One update from m->grads: global norm, non-finite check, clipping, AdamW.
 * Returns 0 when applied, 1 when skipped because the gradients are not finite.
 * *grad_norm receives the norm before clipping. */
int adamw_step(AdamW *o, Model *m, const Config *c, float lr, double *grad_norm);

#endif
