/* Emulation build of kernels/cuda/reduce.cu (see cuda_emu.h). */
#include "kernels/cuda/reduce.cu"
