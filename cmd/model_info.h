/* cmd/model_info.h: what a checkpoint holds, for mha-predict --info: the classes, the
 * vocabulary, the model's shape and parameter count, how it was trained, the update its
 * parameters are from with their dev scores (the ORIGIN section), and for a last.mha the
 * run's position. */
#ifndef MHA_CMD_MODEL_INFO_H
#define MHA_CMD_MODEL_INFO_H

#include <stdio.h>
#include "data/error.h"

/* Reads the checkpoint at path and writes its description to out: lines for people, or with
 * json one JSON object (path, bytes, kind, written_by, parameters, classes, vocab_size,
 * config, origin, state). 0, or MHA_EXIT_DATA with err filled when it cannot be read. */
int model_info_print(const char *path, int json, FILE *out, MhaError *err);

#endif
