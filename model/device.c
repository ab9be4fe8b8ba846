/* model/device.c: the backend a config asks for (see device.h). */
#include "model/device.h"
#include <stdio.h>
#include <string.h>

/* The CPU backend at the configured precision; bf16 on a CPU without AVX512_BF16 says so
 * and runs fp32. mha-train says that train.tf32 does nothing here (a model's stored tf32 is
 * no news to mha-predict). */
static const Backend *cpu_backend_for(const Config *cfg, int bf16, const char *prog) {
    if (cfg->tf32 && strcmp(prog, "mha-train") == 0)
        fprintf(stderr, "%s: note: train.tf32 is for CUDA's matrix products; the cpu computes as train.precision "
                "says (%s)\n", prog, cfg->precision);
    if (bf16) {
        char why[256] = "";
        const Backend *be = mha_cpu_backend_bf16(cfg->threads, why, sizeof why);
        if (be) return be;
        fprintf(stderr, "%s: note: precision \"bf16\" on the cpu: %s; running in fp32\n", prog, why);
    }
    return mha_cpu_backend(cfg->threads);
}

int select_backend(const Config *cfg, const Backend **be, const char *option, MhaError *err) {
    char why[512] = "";
    const int bf16 = strcmp(cfg->precision, "bf16") == 0;
    const char *prog = option[0] == '-' ? "mha-predict" : "mha-train";   /* whose option chose the device */
    if (strcmp(cfg->device, "cpu") == 0) {
        *be = cpu_backend_for(cfg, bf16, prog);
        return 0;
    }
    const Backend *cuda = mha_cuda_backend(cfg->tf32, bf16, why, sizeof why);
    if (cuda) { *be = cuda; return 0; }
    if (strcmp(cfg->device, "cuda") == 0 && option[0] == '-')
        return mha_fail(err, MHA_EXIT_DATA, "%s cuda: %s; use %s cpu or auto", option, why, option);
    if (strcmp(cfg->device, "cuda") == 0)
        return mha_fail(err, MHA_EXIT_DATA, "%s = \"cuda\" but %s; use %s=cpu or auto", option, why, option);
    /* "auto": the cpu, silently when there is no GPU, with a note when there is one it cannot use */
    if (mha_cuda_device_visible()) fprintf(stderr, "%s: note: not using the GPU: %s; running on the cpu\n", prog, why);
    *be = cpu_backend_for(cfg, bf16, prog);
    return 0;
}
