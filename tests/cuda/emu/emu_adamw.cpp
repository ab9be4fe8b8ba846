/* Emulation build of kernels/cuda/adamw.cu (see cuda_emu.h). */
#include "kernels/cuda/adamw.cu"
