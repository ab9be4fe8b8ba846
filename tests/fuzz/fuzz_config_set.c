/* tests/fuzz/fuzz_config_set.c: arbitrary --set strings (one per input line, at most 32)
 * applied with config_load over a small valid config file. Invariants: an accepted
 * config validates and its printed form reads back. */
#include "fuzz_common.h"
#include "model/config.h"

static const char BASE[] = "{\"data\": {\"train\": \"train.tsv\"}, \"model\": {\"d_model\": 8, \"n_heads\": 2}}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) {
        int fd = memfd_create("mha-fuzz-config", 0);
        if (fd < 0 || write(fd, BASE, sizeof BASE - 1) != (ssize_t)(sizeof BASE - 1)) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    char *text = fuzz_string(data, size);
    const char *sets[32];
    int n = 0;
    for (char *p = text; p && n < 32;) {
        sets[n++] = p;
        p = strchr(p, '\n');
        if (p) *p++ = '\0';
    }
    Config c;
    MhaError err;
    if (config_load(&c, path, sets, n, &err) == 0) {
        FUZZ_ASSERT(config_validate(&c, &err) == 0);
        char *a = config_to_json(&c);
        FUZZ_ASSERT(a != NULL);
        Config c2;
        if (config_from_json(&c2, a, "", &err) != 0) {
            fprintf(stderr, "printed config does not read back: %s\n%s\n", err.msg, a);
            abort();
        }
        free(a);
    } else {
        FUZZ_ASSERT(err.code == MHA_EXIT_USAGE);
    }
    free(text);
    return 0;
}
