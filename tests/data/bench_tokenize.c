/* tests/data/bench_tokenize.c: tokenizer throughput on a TSV file (default
 * ../shared/data/shopping10/train.tsv), run by scripts/bench-tokenize. Measures the text
 * of every line tokenised from memory (best of N passes), then the whole reader
 * (dataset_load_train: read, parse, tokenise, count, build the vocabulary). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/dataset.h"
#include "tests/bench/bench_util.h"

static void report(const char *what, double secs, long lines, double bytes, double chars) {
    printf("%-44s %9.0f lines/s  %7.1f MB/s  %6.2f M chars/s\n", what, lines / secs,
           bytes / secs / 1e6, chars / secs / 1e6);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "../shared/data/shopping10/train.tsv";
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1) reps = 1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenize: %s: cannot open (run from the project root, or pass a TSV path)\n", path);
        return 77;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "bench_tokenize: %s: read error\n", path);
        return 1;
    }
    fclose(f);
    buf[size] = '\0';

    /* the text field of each line */
    long n_lines = 0, cap = 1024;
    const char **text = malloc((size_t)cap * sizeof *text);
    size_t *len = malloc((size_t)cap * sizeof *len);
    double bytes = 0, chars = 0;
    for (char *p = buf; *p;) {
        char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
        char *tab = memchr(p, '\t', (size_t)(end - p));
        const char *t = tab ? tab + 1 : p;
        if (n_lines == cap) {
            cap *= 2;
            text = realloc(text, (size_t)cap * sizeof *text);
            len = realloc(len, (size_t)cap * sizeof *len);
        }
        text[n_lines] = t;
        len[n_lines] = (size_t)(end - t);
        for (const char *q = t; q < end; q++) chars += ((unsigned char)*q & 0xC0) != 0x80;
        bytes += (double)(end - t);
        n_lines++;
        p = nl ? nl + 1 : end;
    }
    printf("%s: %ld lines, %.1f MB of text, %.2f M characters; best of %d passes\n", path, n_lines,
           bytes / 1e6, chars / 1e6, reps);

    TokenList tl;
    memset(&tl, 0, sizeof tl);
    static const struct { const char *name; int nfkc, casefold; } modes[] = {
        {"tokenize, NFKC + case folding (default)", 1, 1},
        {"tokenize, no normalisation", 0, 0},
    };
    long tokens = 0;
    for (int m = 0; m < 2; m++) {
        TokenizerOptions o = {modes[m].nfkc, modes[m].casefold, 1};
        double t0 = bench_now();
        tokenize(&o, "x", 1, &tl, NULL);   /* builds the table for these options */
        double first = bench_now() - t0, best = 1e30;
        for (int r = 0; r < reps; r++) {
            tokens = 0;
            t0 = bench_now();
            for (long i = 0; i < n_lines; i++) {
                tokenize(&o, text[i], len[i], &tl, NULL);
                tokens += tl.n;
            }
            double dt = bench_now() - t0;
            if (dt < best) best = dt;
        }
        report(modes[m].name, best, n_lines, bytes, chars);
        printf("  (%ld tokens per pass; one-time table setup %.1f ms)\n", tokens, first * 1e3);
    }

    ReadOptions ro;
    memset(&ro, 0, sizeof ro);
    tokenizer_options_default(&ro.tok);
    ro.max_line_bytes = 1 << 20;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        Vocab *v;
        LabelMap lm;
        Dataset d;
        MhaError err;
        double t0 = bench_now();
        if (dataset_load_train(path, &ro, 1, 0, &v, &lm, &d, &err)) {
            fprintf(stderr, "bench_tokenize: %s\n", err.msg);
            return 1;
        }
        double dt = bench_now() - t0;
        if (dt < best) best = dt;
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }
    report("dataset_load_train (read+tokenize+vocab)", best, n_lines, (double)size, chars);
    token_list_free(&tl);
    free(text);
    free(len);
    free(buf);
    return 0;
}
