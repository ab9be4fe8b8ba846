/* Emulation build of kernels/cuda/backend_cuda.cu (see cuda_emu.h), and mha_emu_waits for the tests. */
#include "kernels/cuda/backend_cuda.cu"

/* For tests (test_cuda_model.c): how often the host has waited for the emulated device so far. */
extern "C" void mha_emu_waits(long *device, long *event) {
    *device = mha_emu::device_waits;
    *event = mha_emu::event_waits;
}
