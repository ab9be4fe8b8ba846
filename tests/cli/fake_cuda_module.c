/* tests/cli/fake_cuda_module.c: a CUDA backend module built against another Backend table
 * (test_cuda_module.sh): its interface number is not the programs', so the loader
 * (kernels/cuda_loader.c) must refuse it before calling anything else in it. */
#include <stddef.h>

unsigned long mha_cuda_module_abi(void);
const void *mha_cuda_backend(int tf32, int bf16, char *why, size_t why_len);

unsigned long mha_cuda_module_abi(void) { return 0; }

const void *mha_cuda_backend(int tf32, int bf16, char *why, size_t why_len) {
    (void)tf32, (void)bf16, (void)why, (void)why_len;
    return (const void *)1;   /* a table the programs must never use */
}
