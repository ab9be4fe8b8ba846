/* model/run.h: what one training run holds, shared by trainer.c and resume.c (private to
 * the trainer: nothing outside model/ includes it). */
#ifndef MHA_MODEL_RUN_H
#define MHA_MODEL_RUN_H

#include <stdint.h>
#include <stdio.h>
#include "data/dataset.h"
#include "data/vocab.h"
#include "kernels/backend.h"
#include "model/classifier.h"
#include "model/config.h"
#include "model/optimizer.h"

/* Everything a run holds, so helpers can take one pointer. */
typedef struct {
    Config *cfg;
    const char *written_by;               /* the mha version for checkpoints' ORIGIN, or NULL */
    const Backend *be;
    Vocab *vocab;
    LabelMap labels;
    Dataset train, dev, test;
    int has_dev, has_test;
    Model model;
    AdamW adamw;
    int add_cls, truncate;
    long update, total_updates, updates_per_epoch;
    int epoch, batch_pos;                 /* data position of the next update */
    double best_metric;  long best_update; int evals_since_best;
    int bad_steps;
    float *best_params;                   /* host copy of the best parameters */
    FILE *metrics_log;
    int metrics_failed;                   /* a write to metrics.jsonl failed (warned once) */
    long metrics_good_bytes;              /* metrics.jsonl's size: whole records only */
    int metrics_torn;                     /* a failed write could not be cut off: size unknown */
    int test_reported;                    /* the test report of the finished run was printed and logged */
    int eval_due;                         /* a train.eval_every evaluation an interrupt cut short: the
                                           * resumed run does it before its next update */
    long metrics_saved_bytes;             /* resume: metrics.jsonl's size when last.mha was saved (-1: unknown) */
    uint64_t train_fingerprint;           /* dataset_fingerprint of train, taken once */
    double seconds_trained;               /* training seconds up to the latest save of last.mha,
                                           * those of earlier runs (resume) included */
} Run;

#endif
