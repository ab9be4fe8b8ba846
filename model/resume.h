/* model/resume.h: last.mha's training state: written at each save, parsed and checked by
 * --resume, and whether a resumed run has work left. Private to the trainer (trainer.c). */
#ifndef MHA_MODEL_RESUME_H
#define MHA_MODEL_RESUME_H

#include "data/error.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/run.h"

/* The run's training state as JSON text for last.mha (malloc'd), or NULL when out of memory. */
char *train_state_json(const Run *r);

/* --resume: loads the checkpoint into *resume and the config it stores into cfg, and moves
 * applies the --set overrides a resume allows (config_apply_resume_sets: train.device and the
 * like), and moves the run to the folder that holds last.mha. Returns 0 (*done set when the run is already
 * complete: said, nothing to do) or an exit code with err filled; *resume is freed on every
 * path that does not return 0 with *done clear. */
int resume_open(const char *path, long max_steps, const char *const *sets, int n_sets, Config *cfg,
                Checkpoint *resume, int *done, MhaError *err);

/* --resume: the parameters, AdamW moments and training state of the checkpoint into the
 * run (the model and optimizer exist, the data is read: n_batches a epoch). Returns 0 (*done
 * set when the run turns out complete, or at --max-steps' update (max_steps > 0) with nothing
 * owed there: said, nothing to do) or an exit code with err filled. */
int resume_restore(Run *r, const Checkpoint *resume, const char *path, int quiet, long max_steps, int n_batches,
                   int *done, MhaError *err);

#endif
