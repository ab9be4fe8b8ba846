/* model/run_dir.h: the output folder of a training run (output.dir): its lock, the check
 * that a new run does not replace an earlier one, temporary checkpoint files left by a
 * killed run, and the folder a last.mha lives in (where --resume continues). */
#ifndef MHA_MODEL_RUN_DIR_H
#define MHA_MODEL_RUN_DIR_H

#include <stddef.h>
#include "data/error.h"

/* Creates the folder (and its parents) and takes an exclusive lock on DIR/.lock, held until
 * the process exits (the OS releases it when the process dies, so a crash never blocks
 * --resume); then removes temporary checkpoint files of processes no longer running.
 * A folder another mha-train holds is an error. */
int run_dir_lock(const char *dir, MhaError *err);

/* Before a save into dir: 0 when dir is still the folder run_dir_lock locked (same device
 * and inode); else MHA_EXIT_DATA with err saying it was moved or replaced during the run,
 * so that the user learns where the run's checkpoints went (its own folder, under the new
 * name) instead of looking for them at the path. 0 when nothing was locked. */
int run_dir_check(const char *dir, MhaError *err);

/* The folder run_dir_lock locked, held open (-1 before): checkpoint_save_at writes through it,
 * so a save never lands in another folder made at the old path, even in the instant between
 * run_dir_check and the save. */
int run_dir_fd(void);

/* A run that failed before writing anything: removes the output folder again when
 * run_dir_lock made it and it holds nothing but the lock file (a mistyped data path leaves no
 * empty folder behind), then the empty folders above it that run_dir_lock made for it
 * (output.dir a/b/c with only a there before: a/b/c and a/b). Folders that existed before, or
 * hold anything else, stay. */
void run_dir_remove_if_unused(const char *dir);

/* A new run (--config) in a folder that holds one: refused (MHA_EXIT_USAGE), so that a
 * mistyped command does not replace a trained model.mha and a resumable last.mha (nor a
 * metrics.jsonl that is not the log of an earlier run's first epoch). With
 * overwrite (the user starts over) both are removed at once, so neither outlives its run;
 * the trainer does that only once the new run has read its data and built its model, so
 * that a mistake found on the way (a mistyped path, bad data, too little memory) leaves
 * the earlier run whole. */
int run_dir_claim(const char *dir, int overwrite, MhaError *err);

/* The run's own files in dir (last.mha, model.mha, metrics.jsonl), which it writes over,
 * must not be any of its inputs (the n paths, "" skipped, named in messages by keys): the
 * same file (device and inode, so links count) is MHA_EXIT_USAGE naming both. */
int run_dir_check_inputs(const char *dir, const char *const *keys, const char *const *inputs, int n,
                         MhaError *err);

/* The canonical absolute folder of an existing file (links resolved: a linked last.mha
 * belongs to the run folder of the file it names) into out (n >= PATH_MAX bytes); 0 on
 * failure (errno set). */
int run_dir_of(const char *path, char *out, size_t n);

#endif
