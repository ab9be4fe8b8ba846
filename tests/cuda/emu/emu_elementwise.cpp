/* Emulation build of kernels/cuda/elementwise.cu (see cuda_emu.h). */
#include "kernels/cuda/elementwise.cu"
