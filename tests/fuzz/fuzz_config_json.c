/* tests/fuzz/fuzz_config_json.c: arbitrary text as a config document (config_from_json,
 * as a checkpoint's stored config is read). Invariants: an accepted config validates, and
 * its printed form (config_to_json) reads back to a config that prints identically; the
 * line json_member_line finds for a key (as config files' errors name it) is a line of
 * the text. */
#include "data/json_syntax.h"
#include "fuzz_common.h"
#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_string(data, size);
    size_t n = strlen(text);
    int lines = 1;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    int line = json_member_line(text, n, size ? data[0] % 4 : 0, size > 1 ? data[1] % 6 - 1 : -1);
    FUZZ_ASSERT(line >= 0 && line <= lines);
    Config c;
    MhaError err;
    if (config_from_json(&c, text, "base", &err) == 0) {
        FUZZ_ASSERT(config_validate(&c, &err) == 0);
        char *a = config_to_json(&c);
        FUZZ_ASSERT(a != NULL);
        Config c2;
        MhaError err2;
        if (config_from_json(&c2, a, "", &err2) != 0) {
            fprintf(stderr, "printed config does not read back: %s\n%s\n", err2.msg, a);
            abort();
        }
        char *b = config_to_json(&c2);
        FUZZ_ASSERT(b != NULL && strcmp(a, b) == 0);
        free(a);
        free(b);
    } else {
        FUZZ_ASSERT(err.code == MHA_EXIT_USAGE);
        FUZZ_ASSERT(memchr(err.msg, '\0', sizeof err.msg) != NULL);
    }
    free(text);
    return 0;
}
