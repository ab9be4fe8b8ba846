/* Emulation build of kernels/cuda/layernorm.cu (see cuda_emu.h). */
#include "kernels/cuda/layernorm.cu"
