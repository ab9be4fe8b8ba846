/* tests/data/test_shopping10.c: the whole data path on ../shared/data/shopping10 (skipped
 * when absent): vocabulary size, dev OOV rate, and padding with and without bucketing. */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data/batcher.h"
#include "tests/bench/bench_util.h"
#include "tests/test_util.h"

#define DIR "../shared/data/shopping10/"

int main(void) {
    if (access(DIR "train.tsv", R_OK) != 0 || access(DIR "dev.tsv", R_OK) != 0)
        return test_skip(DIR "train.tsv and " DIR "dev.tsv not found (run from the project root "
                         "with the shared data next to it)");
    ReadOptions o;
    memset(&o, 0, sizeof o);
    o.format = FORMAT_AUTO;
    tokenizer_options_default(&o.tok);
    o.max_line_bytes = 1 << 20;
    Vocab *v = NULL;
    LabelMap lm;
    Dataset tr, dev;
    MhaError err = {0, ""};
    double t0 = bench_now();
    int rc = dataset_load_train(DIR "train.tsv", &o, 1, 50000, &v, &lm, &tr, &err);
    double t1 = bench_now();
    CHECK(rc == 0, "train: %s", err.msg);
    if (rc) return test_finish("test_shopping10");
    rc = dataset_load(DIR "dev.tsv", &o, v, &lm, &dev, &err);
    CHECK(rc == 0, "dev: %s", err.msg);
    if (rc) return test_finish("test_shopping10");

    printf("train: %d examples (%ld lines, %ld empty, %ld long), %ld tokens, read in %.2f s\n", tr.n,
           tr.n_lines, tr.n_empty, tr.n_long, tr.n_tokens, t1 - t0);
    printf("labels (%d):", lm.n);
    for (int i = 0; i < lm.n; i++) printf(" %s", lm.names[i]);
    printf("\nvocab size: %d\n", vocab_size(v));
    printf("dev: %d examples, %ld tokens, OOV rate %.4f (%ld [UNK])\n", dev.n, dev.n_tokens,
           (double)dev.n_unk / (double)dev.n_tokens, dev.n_unk);
    CHECK(tr.n > 40000 && dev.n > 5000, "example counts %d / %d", tr.n, dev.n);
    CHECK(lm.n == 10, "10 classes, got %d", lm.n);
    CHECK(vocab_size(v) > 1000 && vocab_size(v) <= 50000, "plausible vocab size %d", vocab_size(v));
    CHECK(tr.n_unk == 0, "min_count 1 and room left: no [UNK] in train (%ld)", tr.n_unk);
    CHECK(dev.n_unk > 0 && dev.n_unk < dev.n_tokens / 20, "dev OOV below 5%%: %ld of %ld", dev.n_unk,
          dev.n_tokens);
    CHECK(labelmap_find(&lm, "酒店") >= 0 && labelmap_find(&lm, "书籍") >= 0, "Chinese labels");

    Batcher bk, br;
    CHECK(batcher_init(&bk, &tr, 32, 128, TRUNC_HEAD, 0, 1, 1) == 0, "batcher");
    CHECK(batcher_init(&br, &tr, 32, 128, TRUNC_HEAD, 0, 0, 1) == 0, "batcher");
    double pk = batcher_padding_fraction(&bk), pr = batcher_padding_fraction(&br);
    printf("padding fraction (batch 32, max_len 128): bucketed %.4f, random %.4f\n", pk, pr);
    CHECK(pk < pr, "bucketing pads less: %.4f vs %.4f", pk, pr);
    CHECK(pk < 0.05, "bucketed padding %.4f", pk);
    batcher_free(&bk);
    batcher_free(&br);

    dataset_free(&tr);
    dataset_free(&dev);
    vocab_free(v);
    labelmap_free(&lm);
    return test_finish("test_shopping10");
}
