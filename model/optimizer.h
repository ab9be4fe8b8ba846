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
    double *stats;          /* (2) backend memory: the update's loss sum, its gradients' sum of squares */
    float *grad_scale;      /* (1) backend memory: the clipping factor, NaN for a skipped update */
    double read[2];         /* host copy of stats, once adamw_outcome has waited for it */
    int pending;            /* an update was queued and its outcome not read yet */
} AdamW;

int adamw_create(AdamW *o, const Model *m, MhaError *err);
void adamw_destroy(AdamW *o, const Model *m);

/* Warmup length in updates: warmup < 1 is a fraction of total (rounded), else a count. */
long schedule_warmup(float warmup, long total);
/* Learning rate of update u (0-based) out of total (docs/model.md). */
float schedule_lr(const Config *c, long u, long total);

/* An update in three calls, none of which waits for the device until the last:
 * adamw_begin sets the update's loss sum (o->stats[0]) to zero; the caller adds each batch's
 * losses to it (model_loss_accumulate(m, o->stats)). adamw_queue queues the update from
 * m->grads: global norm, non-finite check, clipping and AdamW, all decided on the device, and a
 * copy of the stats back; t counts it as taken. adamw_outcome waits for that copy: 0 when the
 * update was applied, 1 when it was skipped because the loss or the gradients were not finite
 * (the parameters and moments are unchanged, and t no longer counts it); *loss_sum and
 * *grad_norm (before clipping) may be NULL. The trainer reads the outcome of one update after
 * it has queued the next batch's forward and backward, so the device never waits for the host.
 * Each adamw_queue needs the adamw_outcome of the one before. */
void adamw_begin(AdamW *o, const Model *m);
void adamw_queue(AdamW *o, Model *m, const Config *c, float lr);
int adamw_outcome(AdamW *o, const Model *m, double *loss_sum, double *grad_norm);

/* One update from m->grads, waited for (the loss is not checked): adamw_begin, adamw_queue,
 * adamw_outcome. Returns 0 when applied, 1 when skipped because the gradients are not finite.
 * *grad_norm receives the norm before clipping. */
int adamw_step(AdamW *o, Model *m, const Config *c, float lr, double *grad_norm);

#endif
