/* Emulation build of kernels/cuda/pool.cu (see cuda_emu.h). */
#include "kernels/cuda/pool.cu"
