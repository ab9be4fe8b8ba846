/* tests/cli/fake_cuda_driver.c: a stand-in NVIDIA driver (libcuda.so.1) for
 * test_cuda_module.sh. It claims one device, so the programs' loader (kernels/cuda_loader.c)
 * goes on to open the CUDA backend module; the CUDA runtime inside that module then finds none
 * of the other entry points it needs here and reports an error, which the programs print. */
int cuInit(unsigned flags);
int cuDeviceGetCount(int *count);

int cuInit(unsigned flags) {
    (void)flags;
    return 0;   /* CUDA_SUCCESS */
}

int cuDeviceGetCount(int *count) {
    *count = 1;
    return 0;
}
