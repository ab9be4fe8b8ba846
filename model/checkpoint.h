/* model/checkpoint.h: the versioned checkpoint file (model.mha, last.mha).
 *
 * Layout, little-endian:
 *   "MHACKPT\n" magic (8) | u32 version | u32 section count | u64 file size
 *   sections: u32 tag | u32 zero | u64 payload bytes | payload
 *   u32 CRC-32 of every byte before it.
 * Sections: CONFIG (resolved config, JSON), VOCAB, LABELS, PARAMS (f32), and in last.mha
 * also ADAM_M, ADAM_V (f32) and STATE (JSON: step, epoch, data position, best metric...);
 * optionally ORIGIN last (JSON: the mha that wrote the file, the update the parameters are
 * from, for a model chosen on dev its epoch and dev scores; mha-predict --info shows it).
 * Readers skip sections they do not know, so older ones read files with an ORIGIN.
 * Writes go to a temporary file in the same folder, are flushed to disk and renamed
 * into place, so a crash never leaves a half-written checkpoint under the real name.
 * The loader checks every size against the file before it allocates or reads. */
#ifndef MHA_MODEL_CHECKPOINT_H
#define MHA_MODEL_CHECKPOINT_H

#include <stddef.h>
#include "data/dataset.h"
#include "data/error.h"
#include "data/vocab.h"
#include "model/config.h"

#define CHECKPOINT_VERSION 1u

typedef struct {
    char *config_json;      /* NUL-terminated */
    Vocab *vocab;
    LabelMap labels;
    float *params;  size_t n_params;
    float *adam_m, *adam_v; /* NULL in model-only checkpoints; n_params floats each */
    char *state_json;       /* NULL in model-only checkpoints */
    char *origin_json;      /* NULL: no ORIGIN section (files from before it, or none given) */
    unsigned long long file_bytes;   /* checkpoint_load: the file's size (not used by saving) */
} Checkpoint;

/* Writes ck to path (through .NAME.tmp.PID in the same folder, renamed into place). */
int checkpoint_save(const char *path, const Checkpoint *ck, MhaError *err);
/* The temporary file checkpoint_save(_at) writes NAME to before renaming it into place:
 * ".NAME.tmp.PID" in the same folder (a killed run's are removed by the next one). */
void checkpoint_temp_name(char *out, size_t cap, const char *name);

/* The same into the folder dir_fd holds open, as name (no '/'): the file lands in that folder
 * even if it was moved or another was made at its old path meanwhile. path names the file
 * in messages only. */
int checkpoint_save_at(int dir_fd, const char *name, const char *path, const Checkpoint *ck, MhaError *err);
int checkpoint_load(const char *path, Checkpoint *ck, MhaError *err);
/* cfg: the config parsed from ck->config_json. Checks that the model it describes (with the
 * checkpoint's vocab and labels) has exactly ck->n_params parameters, before any model
 * memory is allocated, so a crafted config cannot make the caller allocate a model the
 * file does not hold. Returns 0 or MHA_EXIT_DATA naming path. */
/* The config stored in ck (its CONFIG section) into cfg; one that does not parse or validate
 * is MHA_EXIT_DATA, "PATH: the stored config is not valid (why)". */
int checkpoint_config(const Checkpoint *ck, Config *cfg, const char *path, MhaError *err);
int checkpoint_check_layout(const Checkpoint *ck, const Config *cfg, const char *path, MhaError *err);
void checkpoint_free(Checkpoint *ck);

uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

#endif
