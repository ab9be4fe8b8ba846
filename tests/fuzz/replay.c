/* tests/fuzz/replay.c: runs a fuzz target without libFuzzer, as an ordinary test: every
 * file named on the command line, and every file in every folder named there (sorted by
 * name, not recursive), goes through LLVMFuzzerTestOneInput once. Used with the seed
 * corpus and the saved crash inputs (tests/fuzz/regressions/<target>/), so a fixed crash
 * stays fixed under every build, the gcc ASan/UBSan one included. Missing folders are
 * skipped (git keeps no empty folder). Exit 0 when every input ran; a failing input
 * aborts (or is reported by a sanitizer) and names itself first on stderr. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: %s: %s\n", path, strerror(errno)); return -1; }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) { fclose(f); fprintf(stderr, "replay: out of memory\n"); return -1; }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *grown = realloc(buf, cap * 2);
        if (!grown) { free(buf); buf = NULL; continue; }
        buf = grown;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); fprintf(stderr, "replay: %s: read error\n", path); return -1; }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    /* a copy of exactly n bytes, so ASan sees any read past the input */
    uint8_t *exact = malloc(n ? n : 1);
    if (n) memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    long ran = 0;
    int errors = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue;
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) == 0) ran++; else errors++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) { fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno)); errors++; continue; }
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;   /* ., .., .gitkeep */
            if (n == cap) { cap = cap ? cap * 2 : 64; names = realloc(names, cap * sizeof *names); }
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n], len, "%s/%s", argv[i], e->d_name);
            n++;
        }
        closedir(d);
        qsort(names, n, sizeof *names, by_name);
        for (size_t k = 0; k < n; k++) {
            if (stat(names[k], &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(names[k]) == 0) ran++; else errors++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("replay: %ld inputs ran%s\n", ran, errors ? ", some could not be read" : "");
    return errors ? 1 : 0;
}
