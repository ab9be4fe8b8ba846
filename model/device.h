/* model/device.h: which backend runs a config (train.device, train.precision, train.threads,
 * train.tf32): the CPU tables, or the CUDA module when it loads and sees a GPU. Used by
 * mha-train and mha-predict. */
#ifndef MHA_MODEL_DEVICE_H
#define MHA_MODEL_DEVICE_H

#include "data/error.h"
#include "kernels/backend.h"
#include "model/config.h"

/* Fills *be. "cpu": the CPU backend (bf16 on a CPU without AVX512_BF16 runs fp32, with a
 * note); "cuda": the GPU, or an error saying why not; "auto": the GPU when it can be used,
 * else the CPU (with a note when a GPU is visible but unusable). option names where the
 * device came from in the error ("train.device", or "--device" for mha-predict). */
int select_backend(const Config *cfg, const Backend **be, const char *option, MhaError *err);

#endif
