/* Emulation build of kernels/cuda/attention_math.cu (see cuda_emu.h). */
#include "kernels/cuda/attention_math.cu"
