/* tests/model/test_config.c: config loading, --set overrides, validation messages,
 * path resolution, the shipped configs/ files and the to_json/from_json round trip; the
 * name helpers of data/error.h that the programs' option parsing uses. */
#include "model/config.h"
#include "data/error.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
            failures++;                                                               \
        }                                                                             \
    } while (0)

#define CHECK_MSG(err, sub)                                                           \
    do {                                                                              \
        if (!strstr((err).msg, (sub))) {                                              \
            fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, \
                    (err).msg, (sub));                                                \
            failures++;                                                               \
        }                                                                             \
    } while (0)

static char tmpdir[256];

/* Write text to tmpdir/name and return the path (static buffer rotated among 4). */
static const char *write_cfg(const char *name, const char *text) {
    static char paths[4][512];
    static int next = 0;
    char *p = paths[next++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    if (!f) { perror(p); exit(1); }
    fputs(text, f);
    fclose(f);
    return p;
}

/* Load text as a config file with overrides; returns the exit code. */
static int load_text(Config *c, const char *text, const char *const *ov, int n, MhaError *e) {
    const char *p = write_cfg("c.json", text);
    memset(e, 0, sizeof *e);
    return config_load(c, p, ov, n, e);
}

static const char *MIN_CFG = "{\"data\": {\"train\": \"t.tsv\"}}";

static void test_defaults(void) {
    Config c, d;
    MhaError e;
    config_defaults(&d);
    CHECK(strcmp(d.format, "auto") == 0 && d.max_len == 128 && strcmp(d.truncate, "head") == 0);
    CHECK(d.min_count == 1 && d.max_vocab == 50000 && d.nfkc == 1 && d.casefold == 1);
    CHECK(d.replace_invalid == 0 && d.max_line_bytes == 1048576 && d.bucket == 1);
    CHECK(d.d_model == 128 && d.n_heads == 4 && d.d_ff == 512 && d.n_layers == 2);
    CHECK(d.dropout == 0.1f && d.attn_dropout == 0.0f);
    CHECK(strcmp(d.activation, "relu") == 0 && strcmp(d.norm, "post") == 0);
    CHECK(strcmp(d.pooling, "mean") == 0 && strcmp(d.position, "learned") == 0);
    CHECK(strcmp(d.attention, "fused") == 0 && d.causal == 0);
    CHECK(d.epochs == 5 && d.batch_size == 32 && d.grad_accum == 1 && d.seed == 42);
    CHECK(d.threads == 0 && d.lr == 5e-4f && d.weight_decay == 0.01f);
    CHECK(d.beta1 == 0.9f && d.beta2 == 0.999f && d.adam_eps == 1e-8f && d.clip_norm == 1.0f);
    CHECK(d.label_smoothing == 0 && d.warmup == 0.1f && strcmp(d.decay, "linear") == 0);
    CHECK(d.min_lr_ratio == 0 && d.decay_embeddings == 0 && d.decay_norms == 0);
    CHECK(d.eval_every == 0 && strcmp(d.metric, "accuracy") == 0 && d.patience == 0);
    CHECK(d.max_bad_steps == 5 && strcmp(d.device, "auto") == 0);
    CHECK(strcmp(d.precision, "fp32") == 0 && d.tf32 == 0);
    CHECK(strcmp(d.out_dir, "runs/default") == 0);
    CHECK(d.train[0] == 0 && d.dev[0] == 0 && d.test[0] == 0);

    /* a file naming only the training data gives the defaults for everything else */
    CHECK(load_text(&c, MIN_CFG, NULL, 0, &e) == 0);
    snprintf(d.train, sizeof d.train, "%s/t.tsv", tmpdir);
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(d.out_dir, sizeof d.out_dir, "%s/runs/default", cwd);   /* the default, in the working directory */
    CHECK(memcmp(&c, &d, sizeof c) == 0);

    /* an empty object (no data.train) is an error; so is a missing file */
    CHECK(load_text(&c, "{}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json: key 'data.train' is required");   /* the file it is missing from, named */
    CHECK(config_load(&c, "/nonexistent/dir/x.json", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "/nonexistent/dir/x.json: cannot read config (No such file");
}

static void test_shipped_configs(void) {
    const char *root = getenv("MHA_SOURCE_ROOT");
    char dir[2200], cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    if (root && root[0] == '/') snprintf(dir, sizeof dir, "%s/configs", root);
    else snprintf(dir, sizeof dir, "%s/%s/configs", cwd, root ? root : ".");   /* stored absolute */
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    int seen = 0, demo = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        size_t n = strlen(ent->d_name);
        if (n < 6 || strcmp(ent->d_name + n - 5, ".json") != 0) continue;
        char path[2600];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        Config c;
        MhaError e = {0};
        int rc = config_load(&c, path, NULL, 0, &e);
        if (rc) fprintf(stderr, "%s: %s\n", path, e.msg);
        CHECK(rc == 0);
        CHECK(config_validate(&c, &e) == 0);
        /* paths are resolved against configs/, whether or not the data exists */
        CHECK(strncmp(c.train, dir, strlen(dir)) == 0);
        CHECK(strncmp(c.out_dir, dir, strlen(dir)) == 0);
        if (strcmp(ent->d_name, "demo.json") == 0) {
            demo = 1;
            char want[2600];
            snprintf(want, sizeof want, "%s/../data/sample/train.tsv", dir);
            CHECK(strcmp(c.train, want) == 0);
            CHECK(c.d_model == 64 && c.n_heads == 4 && c.max_len == 64);
        }
        seen++;
    }
    closedir(d);
    CHECK(seen >= 3);
    CHECK(demo);
}

static void test_paths(void) {
    Config c;
    MhaError e;
    char sub[512], path[600], want[2200];
    snprintf(sub, sizeof sub, "%s/sub", tmpdir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(path, sizeof path, "%s/c.json", sub);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("{\"data\": {\"train\": \"a.tsv\", \"dev\": \"../d.tsv\", \"test\": \"/abs/t.tsv\"},\n"
          " \"output\": {\"dir\": \"out\"}}\n", f);
    fclose(f);
    CHECK(config_load(&c, path, NULL, 0, &e) == 0);
    snprintf(want, sizeof want, "%s/a.tsv", sub);
    CHECK(strcmp(c.train, want) == 0);
    snprintf(want, sizeof want, "%s/../d.tsv", sub);
    CHECK(strcmp(c.dev, want) == 0);
    CHECK(strcmp(c.test, "/abs/t.tsv") == 0);
    snprintf(want, sizeof want, "%s/out", sub);
    CHECK(strcmp(c.out_dir, want) == 0);

    /* --set paths are relative to the working directory, made absolute */
    char cwd[1024], here[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    const char *ov[] = {"data.dev=x/dev.tsv", "data.test=", "output.dir=/abs/out"};
    CHECK(config_load(&c, path, ov, 3, &e) == 0);
    snprintf(want, sizeof want, "%s/x/dev.tsv", cwd);
    CHECK(strcmp(c.dev, want) == 0);
    CHECK(c.test[0] == 0);
    CHECK(strcmp(c.out_dir, "/abs/out") == 0);

    /* a config path without a folder: its paths are relative to the working directory, and
     * stored absolute (a checkpoint's config means the same from any folder) */
    CHECK(chdir(sub) == 0);
    CHECK(getcwd(here, sizeof here) != NULL);
    CHECK(config_load(&c, "c.json", NULL, 0, &e) == 0);
    snprintf(want, sizeof want, "%s/a.tsv", here);
    CHECK(strcmp(c.train, want) == 0);
    snprintf(want, sizeof want, "%s/../d.tsv", here);
    CHECK(strcmp(c.dev, want) == 0);
    CHECK(chdir(cwd) == 0);
}

static void test_overrides(void) {
    Config c;
    MhaError e;
    char want[1024];
    const char *ov[] = {"model.d_model=256", "model.n_heads=8", "train.lr=0.002",
                        "data.nfkc=false", "model.causal=1", "model.pooling=max",
                        "train.seed=-7", "train.epochs=1e1", "train.lr=3e-3"};
    CHECK(load_text(&c, MIN_CFG, ov, 9, &e) == 0);
    CHECK(c.d_model == 256 && c.n_heads == 8);
    CHECK(c.lr == 3e-3f);  /* the later override wins */
    CHECK(c.nfkc == 0 && c.causal == 1);
    CHECK(strcmp(c.pooling, "max") == 0);
    CHECK(c.seed == -7 && c.epochs == 10);

    /* a relation broken by --set: the file's line is named, and the --set that broke it */
    const char *odd_width[] = {"model.d_model=15"};
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"},\n \"model\": {\"n_heads\": 2}}", odd_width, 1, &e) ==
          MHA_EXIT_USAGE);
    snprintf(want, sizeof want, "%s/c.json:2: key 'model.n_heads': 2 does not divide model.d_model = 15 "
             "(allowed: a divisor of d_model, e.g. 1, 3, 5, 15) (model.d_model comes from --set)", tmpdir);
    CHECK_MSG(e, want);
    const char *odd_heads[] = {"model.n_heads=3"};   /* the key of the message itself from --set */
    CHECK(load_text(&c, MIN_CFG, odd_heads, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "--set: key 'model.n_heads': 3 does not divide");

    const char *bad1[] = {"x"};
    CHECK(load_text(&c, MIN_CFG, bad1, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "--set 'x': expected key=value");
    const char *bad2[] = {"model.n_head=3"};
    CHECK(load_text(&c, MIN_CFG, bad2, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "--set: unknown key 'model.n_head' (did you mean 'model.n_heads'?)");
    const char *bad3[] = {"train.lr=abc"};
    CHECK(load_text(&c, MIN_CFG, bad3, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.lr': expected a number");
    const char *bad4[] = {"model.d_model=12x"};
    CHECK(load_text(&c, MIN_CFG, bad4, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'model.d_model': expected an integer");
    const char *bad5[] = {"data.nfkc=maybe"};
    CHECK(load_text(&c, MIN_CFG, bad5, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'data.nfkc': expected true or false");
    const char *bad6[] = {"lr=0.1"};
    CHECK(load_text(&c, MIN_CFG, bad6, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "did you mean 'train.lr'");
    const char *bad7[] = {"train.lr=-1"};
    CHECK(load_text(&c, MIN_CFG, bad7, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "--set: key 'train.lr': -1 is out of range (allowed: > 0)");
    const char *bad8[] = {"model.d_model=99999999999"};
    CHECK(load_text(&c, MIN_CFG, bad8, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'model.d_model'");
    /* numbers as written in decimal only (strtod took hexadecimal and leading spaces, and
     * 1e-400 was said as "0 is out of range") */
    const char *not_numbers[] = {"train.epochs=0x2", "train.lr=0x1p-8", "train.epochs= 1", "train.epochs=1 ",
                                 "train.lr=inf", "train.lr=1e", "train.lr=.", "train.lr=+"};
    for (int i = 0; i < 8; i++) {
        CHECK(load_text(&c, MIN_CFG, &not_numbers[i], 1, &e) == MHA_EXIT_USAGE);
        CHECK_MSG(e, strstr(not_numbers[i], "epochs") ? "expected an integer, got '" : "expected a number, got '");
    }
    const char *tiny[] = {"train.lr=1e-400", "train.lr=1e-50"};   /* 0 as a double; 0 as a float */
    for (int i = 0; i < 2; i++) {
        CHECK(load_text(&c, MIN_CFG, &tiny[i], 1, &e) == MHA_EXIT_USAGE);
        snprintf(want, sizeof want, i ? "--set: key 'train.lr': %s is too small for a float (it would be 0)"
                                      : "--set: key 'train.lr': %s is out of range (allowed: > 0)", tiny[i] + 9);
        CHECK_MSG(e, want);
    }
    const char *fine[] = {"train.lr=.001", "train.weight_decay=+0.5", "train.epochs=2E0"};
    CHECK(load_text(&c, MIN_CFG, fine, 3, &e) == 0);
    CHECK(c.lr == 0.001f && c.weight_decay == 0.5f && c.epochs == 2);
}

static void test_errors(void) {
    Config c;
    MhaError e;
    char want[1024];

    /* unknown keys and sections, with suggestions */
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}, \"model\": {\"n_head\": 4}}", NULL, 0,
                    &e) == MHA_EXIT_USAGE);
    snprintf(want, sizeof want, "%s/c.json:1: unknown key 'model.n_head' (did you mean "
             "'model.n_heads'?)", tmpdir);
    CHECK_MSG(e, want);
    /* the line of the key a message is about: sections and keys of every depth-1/2 position */
    CHECK(load_text(&c, "{\n \"data\": {\"train\": \"t\",\n  \"dev\": \"d\"},\n \"model\": {\n  \"d_model\": 64,"
                        "\n  \"n_head\": 4}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:6: unknown key 'model.n_head'");
    CHECK(load_text(&c, "{\"train\": {\"epochs\": 2,\n\"lr\": {\"x\": 1},\n\"seed\": \"7\"}}", NULL, 0, &e) ==
          MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:2: key 'train.lr': expected a number, got an object");
    CHECK(load_text(&c, "{\"train\": {\"epochs\": 2},\n\n \"train\": {}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:3: section 'train' appears twice");
    CHECK(load_text(&c, "{\"train\": {\"epochs\": 2,\n \"epochs\": 3}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:2: key 'train.epochs' appears twice");
    CHECK(load_text(&c, "{\"data\": {},\n\"modle\": {}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:2: unknown section 'modle'");
    CHECK(load_text(&c, "{\"train\": {\"dropuot\": 0.1}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "unknown key 'train.dropuot'");
    CHECK(load_text(&c, "{\"model\": {\"dropuot\": 0.1}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "did you mean 'model.dropout'");
    CHECK(load_text(&c, "{\"model\": {\"lr\": 0.1}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "did you mean 'train.lr'");
    CHECK(load_text(&c, "{\"train\": {\"learning_rate_schedule\": 1}}", NULL, 0, &e) ==
          MHA_EXIT_USAGE);
    CHECK_MSG(e, "keys in 'train':");
    CHECK_MSG(e, "lr");
    CHECK(load_text(&c, "{\"modle\": {}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "unknown section 'modle' (did you mean 'model'?)");
    CHECK(load_text(&c, "{\"n_heads\": 4}", NULL, 0, &e) == MHA_EXIT_USAGE);   /* a key outside its section */
    CHECK_MSG(e, "c.json:1: unknown section 'n_heads' (did you mean 'model.n_heads'? keys go inside their section)");
    CHECK(load_text(&c, "{\"zzzz\": {}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:1: unknown section 'zzzz' (allowed: data, model, train, output)");
    /* --set keys without their section: the key of that name, or what a key looks like */
    const char *bare_lr[] = {"lr=0.1"}, *bare_drop[] = {"dropout=0.3"}, *bare_foo[] = {"foo=1"};
    CHECK(load_text(&c, MIN_CFG, bare_lr, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "--set: unknown key 'lr' (did you mean 'train.lr'?)");
    CHECK(load_text(&c, MIN_CFG, bare_drop, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "--set: unknown key 'dropout' (did you mean 'model.dropout'?)");
    /* values longer than their field: a path, and a string with allowed values */
    static char long_path[5100], long_pool[300];
    snprintf(long_path, sizeof long_path, "data.train=%04900d", 7);
    snprintf(long_pool, sizeof long_pool, "model.pooling=%0200d", 7);
    const char *too_long_path[] = {long_path}, *too_long_pool[] = {long_pool};
    CHECK(load_text(&c, MIN_CFG, too_long_path, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "--set: key 'data.train': path too long (allowed: at most 4095 bytes)");
    CHECK(load_text(&c, MIN_CFG, too_long_pool, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "\"... is not allowed (allowed: \"mean\", \"cls\", \"max\")");
    CHECK(load_text(&c, MIN_CFG, bare_foo, 1, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "--set: unknown key 'foo' (expected 'section.key' with section data, model, train or output)");
    CHECK(load_text(&c, "{\"model\": 3}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "section 'model': expected an object, got a number");
    CHECK(load_text(&c, "[1, 2]", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "expected a JSON object");

    /* wrong types */
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": \"0.001\"}}", NULL, 0,
                    &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.lr': expected a number, got a string");
    CHECK(load_text(&c, "{\"model\": {\"d_model\": 64.5}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'model.d_model': expected an integer, got 64.5");
    CHECK(load_text(&c, "{\"data\": {\"train\": 5}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'data.train': expected a string, got a number");
    CHECK(load_text(&c, "{\"data\": {\"nfkc\": \"yes\"}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'data.nfkc': expected true or false, got a string");
    CHECK(load_text(&c, "{\"model\": {\"d_model\": 1e20}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'model.d_model'");

    /* ranges and relations */
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": -1}}", NULL, 0, &e) ==
          MHA_EXIT_USAGE);
    snprintf(want, sizeof want, "%s/c.json:1: key 'train.lr': -1 is out of range (allowed: > 0)",
             tmpdir);
    CHECK_MSG(e, want);
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}, \"model\": {\"n_heads\": 3}}", NULL, 0,
                    &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'model.n_heads': 3 does not divide model.d_model = 128 "
                 "(allowed: a divisor of d_model, e.g. 1, 2, 4, 8)");
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}, \"model\": {\"dropout\": 1}}", NULL, 0,
                    &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'model.dropout': 1 is out of range (allowed: 0 <= value < 1)");
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\", \"max_len\": 0}}", NULL, 0, &e) ==
          MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'data.max_len': 0 is out of range (allowed: 1..65536)");
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}, \"model\": {\"pooling\": \"avg\"}}", NULL,
                    0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'model.pooling': \"avg\" is not allowed (allowed: \"mean\", \"cls\", "
                 "\"max\")");
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}, \"train\": {\"batch_size\": 0}}", NULL, 0,
                    &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.batch_size'");
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}, \"train\": {\"beta2\": 1.0}}", NULL, 0,
                    &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.beta2'");

    /* config_validate directly */
    config_defaults(&c);
    strcpy(c.train, "t.tsv");
    CHECK(config_validate(&c, &e) == 0);
    c.epochs = 0;
    CHECK(config_validate(&c, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.epochs': 0 is out of range");
    c.epochs = 1;
    c.grad_accum = 0;
    CHECK(config_validate(&c, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.grad_accum'");
    c.grad_accum = 1;
    c.label_smoothing = 1.0f;
    CHECK(config_validate(&c, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.label_smoothing'");
    c.label_smoothing = 0.1f;
    c.warmup = -0.5f;
    CHECK(config_validate(&c, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.warmup'");
    c.warmup = 1e19f;   /* a count of updates past what a long holds: refused, not converted */
    CHECK(config_validate(&c, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.warmup': 1e+19 is out of range (allowed: 0 <= value <= 1e+09)");
    c.warmup = 100;
    CHECK(config_validate(&c, &e) == 0);
    c.warmup = 1.5f;   /* neither a fraction nor a whole number of updates */
    CHECK(config_validate(&c, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'train.warmup': 1.5 is not allowed (allowed: a fraction 0 <= value < 1, or a whole "
                 "number of updates >= 1)");
    c.warmup = 0.1f;
    strcpy(c.pooling, "cls");   /* [CLS] takes the only position */
    c.max_len = 1;
    CHECK(config_validate(&c, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'data.max_len': 1 leaves no room for text after [CLS] with model.pooling = \"cls\" "
                 "(allowed: >= 2)");
    c.max_len = 2;
    CHECK(config_validate(&c, &e) == 0);
    c.causal = 1;   /* [CLS] would see only itself */
    CHECK(config_validate(&c, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "key 'model.causal': true with model.pooling = \"cls\" would let [CLS], the first position, "
                 "attend only to itself");
    strcpy(c.pooling, "mean");
    CHECK(config_validate(&c, &e) == 0);
}

static void test_invalid_json(void) {
    Config c;
    MhaError e;
    char want[1024];
    {   /* UTF-16 (little-endian, with and without its byte-order mark): named, with the conversion */
        const char *variants[2] = {"\xFF\xFE{\0}\0", "{\0}\0"};
        const size_t sizes[2] = {6, 4};
        for (int v = 0; v < 2; v++) {
            char p[300];
            snprintf(p, sizeof p, "%.200s/u16.json", tmpdir);
            FILE *f = fopen(p, "wb");
            CHECK(f && fwrite(variants[v], 1, sizes[v], f) == sizes[v]);
            if (f) fclose(f);
            memset(&e, 0, sizeof e);
            CHECK(config_load(&c, p, NULL, 0, &e) == MHA_EXIT_USAGE);
            snprintf(want, sizeof want, "%.300s: the config is UTF-16 (it starts with the bytes %s); expected UTF-8 JSON: "
                     "convert it with 'iconv -f UTF-16 -t UTF-8 %s > NEW'", p, v ? "7B 00" : "FF FE", p);
            CHECK_MSG(e, want);
        }
    }
    CHECK(load_text(&c, "{\n  \"data\": {\n    \"train\": \"t\",\n  },\n}\n", NULL, 0, &e) ==
          MHA_EXIT_USAGE);
    snprintf(want, sizeof want, "%s/c.json:4: invalid JSON near '}", tmpdir);
    CHECK_MSG(e, want);
    CHECK_MSG(e, "(expected ");
    CHECK(load_text(&c, "{\n  \"data\": {\"train\": \"t\"}\n  \"model\": {}\n}\n", NULL, 0, &e) ==
          MHA_EXIT_USAGE);
    snprintf(want, sizeof want, "%s/c.json:3: invalid JSON near '\"model\"", tmpdir);
    CHECK_MSG(e, want);
    CHECK_MSG(e, "expected ',' or '}'");
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\"}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:1: invalid JSON at end of file (expected ',' or '}')");
    CHECK(load_text(&c, "\n\n{'data': 1}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:3: invalid JSON near ''data'");
    CHECK(load_text(&c, "", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:1: invalid JSON at end of file");
    CHECK(load_text(&c, "{} x", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "invalid JSON near 'x' (expected nothing after the top-level value)");
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\n\"}}", NULL, 0, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "c.json:1: invalid JSON near '\"t'");
    /* a byte order mark is accepted */
    CHECK(load_text(&c, "\xEF\xBB\xBF{\"data\": {\"train\": \"t\"}}", NULL, 0, &e) == 0);
    /* \u0000 in a path, a value or a section name: refused at its line (before: cJSON's NUL
     * cut the string, so "t.tsv\u0000junk" trained on t.tsv and "model\u0000zz" was model) */
    const char *nuls[3] = {"{\"data\": {\"train\": \"t.tsv\\u0000junk\"}}",
                           "{\"data\": {\"train\": \"t\"},\n \"data\": {\"format\": \"tsv\\u0000x\"}}",
                           "{\"data\": {\"train\": \"t\"},\n\n \"model\\u0000zz\": {}}"};
    for (int v = 0; v < 3; v++) {
        CHECK(load_text(&c, nuls[v], NULL, 0, &e) == MHA_EXIT_USAGE);
        snprintf(want, sizeof want, "c.json:%d: a string holds \\u0000, a NUL character", v + 1);
        CHECK_MSG(e, want);
    }
    /* an escaped backslash before u0000 is text, not the escape */
    CHECK(load_text(&c, "{\"data\": {\"train\": \"t\\\\u0000\"}}", NULL, 0, &e) == 0);
}

static void test_round_trip(void) {
    Config a, b;
    MhaError e = {0};
    const char *ov[] = {
        "data.train=/data/train.tsv", "data.dev=rel/dev.tsv", "data.format=jsonl",
        "data.max_len=300", "data.truncate=head_tail", "data.min_count=3",
        "data.max_vocab=12345", "data.nfkc=0", "data.casefold=false",
        "data.replace_invalid=true", "data.max_line_bytes=4096", "data.bucket=0",
        "model.d_model=96", "model.n_heads=6", "model.d_ff=333", "model.n_layers=3",
        "model.dropout=0.123456789", "model.attn_dropout=0.3", "model.activation=gelu",
        "model.norm=pre", "model.pooling=max", "model.position=sinusoidal",
        "model.attention=math", "model.causal=1", "train.epochs=7", "train.batch_size=24",
        "train.grad_accum=3", "train.seed=123456789", "train.threads=5",
        "train.lr=3.3333333e-4", "train.weight_decay=0.0123", "train.beta1=0.85",
        "train.beta2=0.98765", "train.adam_eps=1.5e-9", "train.clip_norm=0.7",
        "train.label_smoothing=0.05", "train.warmup=250", "train.decay=cosine",
        "train.min_lr_ratio=0.1", "train.decay_embeddings=1", "train.decay_norms=1",
        "train.eval_every=50", "train.metric=macro_f1", "train.patience=4",
        "train.max_bad_steps=9", "train.device=cuda", "train.precision=bf16", "train.tf32=1",
        "output.dir=/tmp/out dir/ü"};
    int n = (int)(sizeof ov / sizeof ov[0]);
    CHECK(load_text(&a, MIN_CFG, ov, n, &e) == 0);
    if (e.msg[0]) fprintf(stderr, "%s\n", e.msg);
    char *json = config_to_json(&a);
    CHECK(json != NULL);
    if (!json) return;
    CHECK(strstr(json, "\"data\"") && strstr(json, "\"model\"") && strstr(json, "\"train\"") &&
          strstr(json, "\"output\""));
    CHECK(strstr(json, "\"n_heads\":\t6") != NULL);
    CHECK(config_from_json(&b, json, NULL, &e) == 0);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    char *json2 = config_to_json(&b);
    CHECK(json2 && strcmp(json, json2) == 0);
    free(json2);
    free(json);

    /* floats survive exactly, defaults print short */
    config_defaults(&a);
    strcpy(a.train, "t.tsv");
    json = config_to_json(&a);
    CHECK(json && strstr(json, "0.1,") && strstr(json, "0.0005") && strstr(json, "1e-08"));
    static const float awkward[] = {1e-8f, 3.0e-38f, 0.999999f, 1.17549435e-38f,
                                    0.1f + 0.2f, 123456.789f, 7e-45f};
    for (size_t i = 0; i < sizeof awkward / sizeof awkward[0]; i++) {
        a.lr = awkward[i];
        a.adam_eps = awkward[i];
        free(json);
        json = config_to_json(&a);
        CHECK(json && config_from_json(&b, json, NULL, &e) == 0);
        CHECK(memcmp(&a, &b, sizeof a) == 0);
    }
    free(json);

    /* relative paths resolve against base_dir; errors say "checkpoint config" */
    CHECK(config_from_json(&b, "{\"data\": {\"train\": \"t.tsv\"}}", "/run", &e) == 0);
    CHECK(strcmp(b.train, "/run/t.tsv") == 0);
    CHECK(config_from_json(&b, "{\"data\": {\"train\": 1}}", NULL, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "checkpoint config: key 'data.train'");
    CHECK(config_from_json(&b, "{\"data\": ", NULL, &e) == MHA_EXIT_USAGE);
    CHECK_MSG(e, "checkpoint config:1: invalid JSON");
}

/* mha_name_index: exact matches only; mha_did_you_mean: the nearest name when close enough. */
static void test_name_helpers(void) {
    static const char *const names[] = {"--model", "--top-k", "--eval", "--json"};
    CHECK(mha_name_index("--eval", names, 4) == 2);
    CHECK(mha_name_index("--model", names, 4) == 0 && mha_name_index("--json", names, 4) == 3);
    /* a prefix, a longer name, the empty string, an empty table: no match */
    CHECK(mha_name_index("--ev", names, 4) == -1 && mha_name_index("--evaluate", names, 4) == -1);
    CHECK(mha_name_index("", names, 4) == -1 && mha_name_index("--eval", names, 0) == -1);
    const char *near = mha_did_you_mean("--topk", names, 4);
    CHECK(near && strcmp(near, "--top-k") == 0);
    CHECK(mha_did_you_mean("--threads", names, 4) == NULL);
}

static void test_help(void) {
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    config_print_help(f);
    long size = ftell(f);
    CHECK(size > 1000);
    char buf[65536];
    rewind(f);
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = '\0';
    CHECK(strstr(buf, "model.n_heads") && strstr(buf, "train.lr") && strstr(buf, "output.dir"));
    fclose(f);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/mha-config-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_defaults();
    test_shipped_configs();
    test_paths();
    test_overrides();
    test_errors();
    test_invalid_json();
    test_round_trip();
    test_help();
    test_name_helpers();
    char p[600];
    snprintf(p, sizeof p, "%s/sub/c.json", tmpdir);
    remove(p);
    snprintf(p, sizeof p, "%s/sub", tmpdir);
    remove(p);
    snprintf(p, sizeof p, "%s/c.json", tmpdir);
    remove(p);
    remove(tmpdir);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("config: all checks passed\n");
    return failures ? 1 : 0;
}
