/* Emulation build of kernels/cuda/loss.cu (see cuda_emu.h). */
#include "kernels/cuda/loss.cu"
