/* model/trainer.h: the training run behind mha-train: data, model, AdamW with warmup
 * and decay, gradient accumulation and clipping, dev evaluation, best-model and
 * last-state checkpoints, exact resume, early stopping, the final test report. */
#ifndef MHA_MODEL_TRAINER_H
#define MHA_MODEL_TRAINER_H

#include "data/error.h"
#include "model/config.h"

typedef struct {
    const char *resume_path;   /* last.mha to continue from, or NULL */
    long max_steps;            /* stop (saving last.mha) after this many updates in total; 0 = no limit */
    int quiet;                 /* no resolved config, model line or progress lines */
    int overwrite;             /* a new run may replace the run in output.dir */
    int profile;               /* time every op family and print a table at the end */
    const char *const *resume_sets;   /* --set key=value with --resume (config_apply_resume_sets) */
    int n_resume_sets;
    const char *version;       /* the mha version written into checkpoints (ORIGIN), or NULL */
} TrainOptions;

/* Runs training. Returns 0, MHA_EXIT_DATA (runtime/data error) or MHA_EXIT_USAGE with err
 * filled, or 130 after Ctrl-C (last.mha saved). */
int train_run(Config *cfg, const TrainOptions *opt, MhaError *err);

#endif
