/* model/run_data.h: a training run's data: read and checked, described on stderr (run_data.c;
 * private to the trainer, like run.h). */
#ifndef MHA_MODEL_RUN_DATA_H
#define MHA_MODEL_RUN_DATA_H

#include "data/batcher.h"
#include "data/error.h"
#include "model/checkpoint.h"
#include "model/run.h"

/* Reads r->cfg's training file (a fresh run: its vocabulary and classes; resume: those
 * stored in the checkpoint, which the file must still fit), then its dev and test files, into
 * r; refuses labels that look swapped or like ids; notes what repeats. */
int run_load_data(Run *r, const Checkpoint *resume, MhaError *err);

/* The examples, tokens, classes, notes on each file, batches and truncation, on stderr. */
void run_print_data_stats(const Run *r, const Batcher *bt);

/* Notes on settings the run makes odd: dev-set options without a dev set, and for a run not
 * resumed, a warmup longer than r->total_updates (set it first). */
void run_note_schedule(const Run *r, int resumed);

#endif
