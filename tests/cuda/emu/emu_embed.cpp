/* Emulation build of kernels/cuda/embed.cu (see cuda_emu.h). */
#include "kernels/cuda/embed.cu"
