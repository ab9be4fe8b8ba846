/* model/config.c: the run configuration. Every key is described once in KEYS[] (name,
 * type, field offset, default, range or allowed values, help); parsing JSON, --set
 * overrides, validation, help and to_json are all driven by that table.
 * Paths in a config file are relative to the file's folder (to the working directory for a
 * config read from a pipe, <(...)); paths given with --set are relative to the current working
 * directory. Both are stored absolute, so that the config a checkpoint holds means the same
 * from any folder (mha-train --resume). */
#include "model/config.h"
#include "data/json_syntax.h"
#include "data/utf8.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- key table */

typedef enum { T_INT, T_FLOAT, T_BOOL, T_STR, T_PATH } KeyType;

enum { R_LO = 1, R_LO_OPEN = 2, R_HI = 4, R_HI_OPEN = 8 };  /* range flags */

typedef struct {
    const char *name;            /* "section.key" */
    KeyType type;
    size_t off, size;            /* field in Config */
    double def;                  /* default (int, float, bool) */
    const char *defs;            /* default (string, path) */
    unsigned range;              /* R_* flags: which of lo/hi apply, open or closed */
    double lo, hi;
    const char *const *allowed;  /* NULL-terminated allowed strings, or NULL */
    const char *help;
} KeyDesc;

#define FIELD(f) offsetof(Config, f), sizeof(((Config *)0)->f)

static const char *const FORMATS[] = {"auto", "tsv", "fasttext", "jsonl", NULL};
static const char *const TRUNCATES[] = {"head", "head_tail", NULL};
static const char *const ACTIVATIONS[] = {"relu", "gelu", NULL};
static const char *const NORMS[] = {"post", "pre", NULL};
static const char *const POOLINGS[] = {"mean", "cls", "max", NULL};
static const char *const POSITIONS[] = {"learned", "sinusoidal", NULL};
static const char *const ATTENTIONS[] = {"fused", "math", NULL};
static const char *const DECAYS[] = {"linear", "cosine", "none", NULL};
static const char *const METRICS[] = {"accuracy", "macro_f1", "loss", NULL};
static const char *const DEVICES[] = {"auto", "cpu", "cuda", NULL};
static const char *const PRECISIONS[] = {"fp32", "bf16", NULL};

#define CLOSED (R_LO | R_HI)
#define HALF_OPEN (R_LO | R_HI | R_HI_OPEN)
#define POSITIVE (R_LO | R_LO_OPEN)

static const KeyDesc KEYS[] = {
    /* data */
    {"data.train", T_PATH, FIELD(train), 0, "", 0, 0, 0, NULL,
     "training file (required); relative to the config file's folder"},
    {"data.dev", T_PATH, FIELD(dev), 0, "", 0, 0, 0, NULL,
     "development file for evaluation and model selection (optional)"},
    {"data.test", T_PATH, FIELD(test), 0, "", 0, 0, 0, NULL,
     "test file, evaluated once with the best model (optional)"},
    {"data.format", T_STR, FIELD(format), 0, "auto", 0, 0, 0, FORMATS,
     "input format; auto detects it from the first non-empty line"},
    {"data.max_len", T_INT, FIELD(max_len), 128, NULL, CLOSED, 1, 65536, NULL,
     "tokens kept per example, including [CLS] when model.pooling = cls"},
    {"data.truncate", T_STR, FIELD(truncate), 0, "head", 0, 0, 0, TRUNCATES,
     "how long examples are cut: keep the head, or the head and the tail"},
    {"data.min_count", T_INT, FIELD(min_count), 1, NULL, R_LO, 1, 0, NULL,
     "minimum training count for a token to enter the vocabulary"},
    {"data.max_vocab", T_INT, FIELD(max_vocab), 50000, NULL, R_LO, 4, 0, NULL,
     "maximum vocabulary size, including the 3 reserved ids"},
    {"data.nfkc", T_BOOL, FIELD(nfkc), 1, NULL, 0, 0, 0, NULL,
     "NFKC-normalise text before tokenising"},
    {"data.casefold", T_BOOL, FIELD(casefold), 1, NULL, 0, 0, 0, NULL,
     "case-fold text before tokenising"},
    {"data.replace_invalid", T_BOOL, FIELD(replace_invalid), 0, NULL, 0, 0, 0, NULL,
     "replace invalid UTF-8 with U+FFFD instead of failing"},
    {"data.max_line_bytes", T_INT, FIELD(max_line_bytes), 1048576, NULL, CLOSED, 16, 1 << 30,
     NULL, "a line's text longer than this is cut at a character boundary (and counted)"},
    {"data.bucket", T_BOOL, FIELD(bucket), 1, NULL, 0, 0, 0, NULL,
     "group examples of similar length into batches"},

    /* model */
    {"model.d_model", T_INT, FIELD(d_model), 128, NULL, CLOSED, 1, 65536, NULL,
     "width of the token representations"},
    {"model.n_heads", T_INT, FIELD(n_heads), 4, NULL, CLOSED, 1, 65536, NULL,
     "attention heads; must divide model.d_model"},
    {"model.d_ff", T_INT, FIELD(d_ff), 512, NULL, CLOSED, 1, 1 << 20, NULL,
     "hidden width of the feed-forward block"},
    {"model.n_layers", T_INT, FIELD(n_layers), 2, NULL, CLOSED, 0, 1024, NULL,
     "number of Transformer layers"},
    {"model.dropout", T_FLOAT, FIELD(dropout), 0.1, NULL, HALF_OPEN, 0, 1, NULL,
     "dropout on embeddings and residual branches"},
    {"model.attn_dropout", T_FLOAT, FIELD(attn_dropout), 0.0, NULL, HALF_OPEN, 0, 1, NULL,
     "dropout on the attention probabilities"},
    {"model.activation", T_STR, FIELD(activation), 0, "relu", 0, 0, 0, ACTIVATIONS,
     "feed-forward activation (gelu is the exact erf form)"},
    {"model.norm", T_STR, FIELD(norm), 0, "post", 0, 0, 0, NORMS,
     "LayerNorm placement: post (as in the original articles) or pre"},
    {"model.pooling", T_STR, FIELD(pooling), 0, "mean", 0, 0, 0, POOLINGS,
     "sequence pooling before the classifier head"},
    {"model.position", T_STR, FIELD(position), 0, "learned", 0, 0, 0, POSITIONS,
     "position encoding: learned table or fixed sinusoids"},
    {"model.attention", T_STR, FIELD(attention), 0, "fused", 0, 0, 0, ATTENTIONS,
     "attention implementation: fused kernel or plain matrix math"},
    {"model.causal", T_BOOL, FIELD(causal), 0, NULL, 0, 0, 0, NULL,
     "mask attention to earlier positions only"},

    /* train */
    {"train.epochs", T_INT, FIELD(epochs), 5, NULL, CLOSED, 1, 1000000, NULL,
     "passes over the training set"},
    {"train.batch_size", T_INT, FIELD(batch_size), 32, NULL, CLOSED, 1, 1 << 20, NULL,
     "examples per micro-batch"},
    {"train.grad_accum", T_INT, FIELD(grad_accum), 1, NULL, CLOSED, 1, 1 << 20, NULL,
     "micro-batches summed into one update"},
    {"train.seed", T_INT, FIELD(seed), 42, NULL, 0, 0, 0, NULL,
     "random seed (initialisation, shuffling, dropout)"},
    {"train.threads", T_INT, FIELD(threads), 0, NULL, CLOSED, 0, MHA_MAX_THREADS, NULL,
     "CPU threads; 0 = OMP_NUM_THREADS when set, else all cores"},
    {"train.lr", T_FLOAT, FIELD(lr), 5e-4, NULL, POSITIVE, 0, 0, NULL,
     "peak learning rate"},
    {"train.weight_decay", T_FLOAT, FIELD(weight_decay), 0.01, NULL, R_LO, 0, 0, NULL,
     "AdamW decoupled weight decay"},
    {"train.beta1", T_FLOAT, FIELD(beta1), 0.9, NULL, HALF_OPEN, 0, 1, NULL,
     "AdamW first-moment decay"},
    {"train.beta2", T_FLOAT, FIELD(beta2), 0.999, NULL, HALF_OPEN, 0, 1, NULL,
     "AdamW second-moment decay"},
    {"train.adam_eps", T_FLOAT, FIELD(adam_eps), 1e-8, NULL, POSITIVE, 0, 0, NULL,
     "AdamW denominator epsilon"},
    {"train.clip_norm", T_FLOAT, FIELD(clip_norm), 1.0, NULL, R_LO, 0, 0, NULL,
     "clip gradients to this global norm; 0 = off"},
    {"train.label_smoothing", T_FLOAT, FIELD(label_smoothing), 0.0, NULL, HALF_OPEN, 0, 1,
     NULL, "label smoothing of the cross-entropy loss"},
    {"train.warmup", T_FLOAT, FIELD(warmup), 0.1, NULL, CLOSED, 0, 1e9, NULL,
     "warmup: < 1 a fraction of all updates, >= 1 a number of updates"},
    {"train.decay", T_STR, FIELD(decay), 0, "linear", 0, 0, 0, DECAYS,
     "learning-rate schedule after warmup"},
    {"train.min_lr_ratio", T_FLOAT, FIELD(min_lr_ratio), 0.0, NULL, CLOSED, 0, 1, NULL,
     "floor of the decayed learning rate, as a fraction of train.lr"},
    {"train.decay_embeddings", T_BOOL, FIELD(decay_embeddings), 0, NULL, 0, 0, 0, NULL,
     "apply weight decay to the embeddings too"},
    {"train.decay_norms", T_BOOL, FIELD(decay_norms), 0, NULL, 0, 0, 0, NULL,
     "apply weight decay to the LayerNorm gains too (biases never)"},
    {"train.eval_every", T_INT, FIELD(eval_every), 0, NULL, R_LO, 0, 0, NULL,
     "evaluate every N updates and after the last; 0 = at the end of every epoch"},
    {"train.metric", T_STR, FIELD(metric), 0, "accuracy", 0, 0, 0, METRICS,
     "dev metric that selects the best model"},
    {"train.patience", T_INT, FIELD(patience), 0, NULL, R_LO, 0, 0, NULL,
     "evaluations without improvement before stopping; 0 = never stop early"},
    {"train.max_bad_steps", T_INT, FIELD(max_bad_steps), 5, NULL, R_LO, 1, 0, NULL,
     "consecutive non-finite updates before giving up"},
    {"train.device", T_STR, FIELD(device), 0, "auto", 0, 0, 0, DEVICES,
     "compute device; auto uses CUDA when available"},
    {"train.precision", T_STR, FIELD(precision), 0, "fp32", 0, 0, 0, PRECISIONS,
     "compute precision; bf16: products in bf16 with fp32 accumulation (CUDA, or a CPU with "
     "AVX512_BF16, on AMX tiles where it has them; elsewhere fp32, with a note)"},
    {"train.tf32", T_BOOL, FIELD(tf32), 0, NULL, 0, 0, 0, NULL,
     "allow TF32 matrix multiplies on CUDA"},

    /* output */
    {"output.dir", T_PATH, FIELD(out_dir), 0, "runs/default", 0, 0, 0, NULL,
     "run folder (checkpoints, logs); relative to the config file's folder (the default: "
     "to the working directory)"},
};

enum { NKEYS = (int)(sizeof KEYS / sizeof KEYS[0]) };

static const char *const SECTIONS[] = {"data", "model", "train", "output"};
enum { NSECTIONS = 4 };

#define KEY_INT(c, k) ((int *)((char *)(c) + (k)->off))
#define KEY_FLOAT(c, k) ((float *)((char *)(c) + (k)->off))
#define KEY_STR(c, k) ((char *)(c) + (k)->off)
#define CKEY_INT(c, k) (*(const int *)((const char *)(c) + (k)->off))
#define CKEY_FLOAT(c, k) (*(const float *)((const char *)(c) + (k)->off))
#define CKEY_STR(c, k) ((const char *)(c) + (k)->off)

/* ---------------------------------------------------------------- helpers */

/* "LOC: message" into err (LOC may be NULL: no prefix); returns MHA_EXIT_USAGE. */
static int failf(MhaError *err, const char *loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int failf(MhaError *err, const char *loc, const char *fmt, ...) {
    char buf[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (loc) return mha_fail(err, MHA_EXIT_USAGE, "%s: %s", loc, buf);
    return mha_fail(err, MHA_EXIT_USAGE, "%s", buf);
}

static const char *key_short(const KeyDesc *k) { return strchr(k->name, '.') + 1; }

static int key_in_section(const KeyDesc *k, const char *sec) {
    size_t n = strlen(sec);
    return strncmp(k->name, sec, n) == 0 && k->name[n] == '.';
}

static int find_key(const char *dotted) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, dotted) == 0) return i;
    return -1;
}

static int find_section(const char *name) {
    for (int i = 0; i < NSECTIONS; i++)
        if (strcmp(SECTIONS[i], name) == 0) return i;
    return -1;
}

/* Shortest decimal text (<= 9 significant digits) that reads back as exactly f. */
static void fmt_float(char *buf, size_t n, float f) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) return;
    }
    snprintf(buf, n, "%.9g", (double)f);
}

static void fmt_num(char *buf, size_t n, const KeyDesc *k, double v) {
    if (k->type == T_FLOAT) fmt_float(buf, n, (float)v);
    else snprintf(buf, n, "%.17g", v);
}

/* The allowed values of key k as text ("> 0", "0 <= value < 1", "1..65536", "a", "b"). */
static void allowed_text(const KeyDesc *k, char *buf, size_t n) {
    char lo[48], hi[48];
    buf[0] = '\0';
    if (k->type == T_BOOL) { snprintf(buf, n, "true or false"); return; }
    if (k->allowed) {
        size_t used = 0;
        for (int i = 0; k->allowed[i] && used < n; i++)
            used += (size_t)snprintf(buf + used, n - used, "%s\"%s\"", i ? ", " : "",
                                     k->allowed[i]);
        return;
    }
    if (k->type == T_STR || k->type == T_PATH) {
        snprintf(buf, n, "text of at most %zu bytes", k->size - 1);
        return;
    }
    unsigned r = k->range;
    double vlo = k->lo, vhi = k->hi;
    if (k->type == T_INT && !(r & (R_LO | R_HI))) {  /* any int */
        r = R_LO | R_HI;
        vlo = INT_MIN;
        vhi = INT_MAX;
    }
    fmt_num(lo, sizeof lo, k, vlo);
    fmt_num(hi, sizeof hi, k, vhi);
    if ((r & R_LO) && (r & R_HI)) {
        if (k->type == T_INT && !(r & (R_LO_OPEN | R_HI_OPEN)))
            snprintf(buf, n, "%s..%s", lo, hi);
        else
            snprintf(buf, n, "%s %s value %s %s", lo, (r & R_LO_OPEN) ? "<" : "<=",
                     (r & R_HI_OPEN) ? "<" : "<=", hi);
    } else if (r & R_LO) {
        snprintf(buf, n, "%s %s", (r & R_LO_OPEN) ? ">" : ">=", lo);
    } else if (r & R_HI) {
        snprintf(buf, n, "%s %s", (r & R_HI_OPEN) ? "<" : "<=", hi);
    } else {
        snprintf(buf, n, "any finite number");
    }
}

static int in_range(const KeyDesc *k, double v) {
    if (!isfinite(v)) return 0;
    if (k->range & R_LO) {
        if ((k->range & R_LO_OPEN) ? !(v > k->lo) : !(v >= k->lo)) return 0;
    }
    if (k->range & R_HI) {
        if ((k->range & R_HI_OPEN) ? !(v < k->hi) : !(v <= k->hi)) return 0;
    }
    if (k->type == T_INT && (v < INT_MIN || v > INT_MAX)) return 0;
    if (k->type == T_FLOAT && fabs(v) > FLT_MAX) return 0;
    return 1;
}

static int range_error(MhaError *err, const char *loc, const KeyDesc *k, const char *value) {
    char allowed[512];
    allowed_text(k, allowed, sizeof allowed);
    return failf(err, loc, "key '%s': %s is out of range (allowed: %s)", k->name, value,
                 allowed);
}

static int enum_error(MhaError *err, const char *loc, const KeyDesc *k, const char *value) {
    char allowed[512];
    allowed_text(k, allowed, sizeof allowed);
    return failf(err, loc, "key '%s': \"%.64s\"%s is not allowed (allowed: %s)", k->name,
                 value, strlen(value) > 64 ? "..." : "", allowed);
}

/* Levenshtein distance (strings longer than 63 bytes are compared by their head). */
/* "unknown key 'X' (did you mean 'Y'?)" or a list of the section's keys / the sections. */
static int unknown_key(MhaError *err, const char *loc, const char *dotted) {
    char sec[64] = "";
    const char *dot = strchr(dotted, '.');
    const char *shortname = dot ? dot + 1 : dotted;
    int s = -1;
    if (dot && (size_t)(dot - dotted) < sizeof sec) {
        memcpy(sec, dotted, (size_t)(dot - dotted));
        sec[dot - dotted] = '\0';
        s = find_section(sec);
    }

    /* 1. the same key name in another section ("model.lr" -> "train.lr") */
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(key_short(&KEYS[i]), shortname) == 0)
            return failf(err, loc, "unknown key '%s' (did you mean '%s'?)", dotted,
                         KEYS[i].name);

    /* 2. the nearest name: within the section when it exists, else over all keys */
    int best = -1, best_d = INT_MAX;
    for (int i = 0; i < NKEYS; i++) {
        int d;
        if (s >= 0) {
            if (!key_in_section(&KEYS[i], SECTIONS[s])) continue;
            d = mha_edit_distance(shortname, key_short(&KEYS[i]));
        } else {
            d = mha_edit_distance(dotted, KEYS[i].name);
            if (!dot) {
                int d2 = mha_edit_distance(dotted, key_short(&KEYS[i]));
                if (d2 < d) d = d2;
            }
        }
        if (d < best_d) { best_d = d; best = i; }
    }
    if (best >= 0 && mha_close_enough(best_d, s >= 0 ? shortname : dotted))
        return failf(err, loc, "unknown key '%s' (did you mean '%s'?)", dotted,
                     KEYS[best].name);

    /* 3. nothing close: list what exists */
    char list[1024];
    size_t used = 0;
    list[0] = '\0';
    if (s >= 0) {
        for (int i = 0; i < NKEYS && used < sizeof list; i++)
            if (key_in_section(&KEYS[i], SECTIONS[s]))
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                         used ? ", " : "", key_short(&KEYS[i]));
        return failf(err, loc, "unknown key '%s' (keys in '%s': %s)", dotted, SECTIONS[s],
                     list);
    }
    return failf(err, loc,
                 "unknown key '%s' (expected 'section.key' with section data, model, train "
                 "or output)", dotted);
}

static int unknown_section(MhaError *err, const char *loc, const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(key_short(&KEYS[i]), name) == 0)
            return failf(err, loc, "unknown section '%s' (did you mean '%s'? keys go inside "
                         "their section)", name, KEYS[i].name);
    const char *near = mha_did_you_mean(name, SECTIONS, NSECTIONS);
    if (near) return failf(err, loc, "unknown section '%s' (did you mean '%s'?)", name, near);
    return failf(err, loc, "unknown section '%s' (allowed: data, model, train, output)", name);
}

/* dir + "/" + rel, unless rel is empty or absolute or dir is empty / ".". */
static int resolve_path(char *out, size_t n, const char *dir, const char *rel) {
    int len;
    if (!rel[0] || rel[0] == '/' || !dir || !dir[0] || strcmp(dir, ".") == 0)
        len = snprintf(out, n, "%s", rel);
    else if (dir[strlen(dir) - 1] == '/')
        len = snprintf(out, n, "%s%s", dir, rel);
    else
        len = snprintf(out, n, "%s/%s", dir, rel);
    return len >= 0 && (size_t)len < n ? 0 : -1;
}

/* The absolute form of folder dir ("." is the working directory), made textually (no links
 * resolved, so messages show the folders the user named): paths stored in a run's
 * checkpoints then mean the same from any working directory (--resume). -1 when the
 * result does not fit or the working directory cannot be read. */
static int absolute_dir(char *out, size_t n, const char *dir) {
    if (dir[0] == '/') return snprintf(out, n, "%s", dir) < (int)n ? 0 : -1;
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    int len = strcmp(dir, ".") == 0 ? snprintf(out, n, "%s", cwd)
                                    : snprintf(out, n, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", dir);
    return len >= 0 && (size_t)len < n ? 0 : -1;
}

static void dir_of(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) { snprintf(out, n, "."); return; }
    if (slash == path) { snprintf(out, n, "/"); return; }
    snprintf(out, n, "%.*s", (int)(slash - path), path);
}

/* ---------------------------------------------------------------- setting values */

static int set_string(Config *c, const KeyDesc *k, const char *value, const char *base_dir,
                      const char *loc, MhaError *err) {
    char *dst = KEY_STR(c, k);
    char tmp[4096 + 1];
    if (k->type == T_PATH && value[0] == '~' && (value[1] == '\0' || value[1] == '/')) {
        /* the home folder, as a shell would have it (a shell leaves key=~/x alone) */
        const char *home = getenv("HOME");
        if (!home || home[0] != '/')
            return failf(err, loc, "key '%s': '%s' starts with '~' and HOME is %s (expected a path without "
                         "'~': write the home folder out)", k->name, value,
                         home ? "not an absolute path" : "not set");
        if (snprintf(tmp, sizeof tmp, "%s%s", home, value + 1) >= (int)sizeof tmp || strlen(tmp) >= k->size)
            return failf(err, loc, "key '%s': path too long (allowed: at most %zu bytes)", k->name, k->size - 1);
        value = tmp;
    } else if (k->type == T_PATH) {
        if (resolve_path(tmp, sizeof tmp, base_dir, value) != 0 || strlen(tmp) >= k->size)
            return failf(err, loc, "key '%s': path too long (allowed: at most %zu bytes)",
                         k->name, k->size - 1);
        value = tmp;
    }
    size_t len = strlen(value);
    if (len >= k->size) {
        if (k->allowed) return enum_error(err, loc, k, value);
        return failf(err, loc, "key '%s': value too long (allowed: at most %zu bytes)",
                     k->name, k->size - 1);
    }
    memset(dst, 0, k->size);
    memcpy(dst, value, len);
    return 0;
}

static int set_number(Config *c, const KeyDesc *k, double v, const char *text,
                      const char *loc, MhaError *err) {
    if (k->type == T_INT) {
        if (!(v >= INT_MIN && v <= INT_MAX)) return range_error(err, loc, k, text);
        *KEY_INT(c, k) = (int)v;
    } else {
        if (!isfinite(v) || fabs(v) > FLT_MAX) return range_error(err, loc, k, text);
        if (v != 0 && (float)v == 0)   /* (else said as "0 is out of range" by the checks after) */
            return failf(err, loc, "key '%s': %s is too small for a float (it would be 0)", k->name, text);
        *KEY_FLOAT(c, k) = (float)v;
    }
    return 0;
}

static const char *json_type_name(const cJSON *j) {
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "an invalid value";
}

static int set_from_json(Config *c, const KeyDesc *k, const cJSON *j, const char *base_dir,
                         const char *loc, MhaError *err) {
    char text[64];
    switch (k->type) {
    case T_INT:
    case T_FLOAT: {
        if (!cJSON_IsNumber(j))
            return failf(err, loc, "key '%s': expected %s, got %s", k->name,
                         k->type == T_INT ? "an integer" : "a number", json_type_name(j));
        double v = j->valuedouble;
        snprintf(text, sizeof text, "%.17g", v);
        if (k->type == T_INT && v != floor(v))
            return failf(err, loc, "key '%s': expected an integer, got %s", k->name, text);
        return set_number(c, k, v, text, loc, err);
    }
    case T_BOOL:
        if (cJSON_IsBool(j)) { *KEY_INT(c, k) = cJSON_IsTrue(j) ? 1 : 0; return 0; }
        if (cJSON_IsNumber(j) && (j->valuedouble == 0 || j->valuedouble == 1)) {
            *KEY_INT(c, k) = j->valuedouble == 1;
            return 0;
        }
        return failf(err, loc, "key '%s': expected true or false, got %s", k->name,
                     json_type_name(j));
    case T_STR:
    case T_PATH:
        if (!cJSON_IsString(j) || !j->valuestring)
            return failf(err, loc, "key '%s': expected a string, got %s", k->name,
                         json_type_name(j));
        return set_string(c, k, j->valuestring, k->type == T_PATH ? base_dir : NULL, loc, err);
    }
    return 0;
}

/* A number as a person types it: [+-] digits [. digits] [e [+-] digits], or [+-] . digits [...];
 * no spaces, hexadecimal, inf or nan (which strtod would take). */
static int is_decimal_number(const char *s) {
    if (*s == '+' || *s == '-') s++;
    int digits = 0;
    while (*s >= '0' && *s <= '9') s++, digits++;
    if (*s == '.') {
        s++;
        while (*s >= '0' && *s <= '9') s++, digits++;
    }
    if (!digits) return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return 0;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == '\0';
}

/* A --set value: numbers must be the whole string; paths are relative to cwd (the
 * working directory, not the config file's folder). */
static int set_from_text(Config *c, const KeyDesc *k, const char *value, const char *cwd,
                         const char *loc, MhaError *err) {
    char *end;
    if ((k->type == T_INT || k->type == T_FLOAT) && !is_decimal_number(value))   /* no "0x10", " 1", "inf" */
        return failf(err, loc, "key '%s': expected %s, got '%s'", k->name,
                     k->type == T_INT ? "an integer" : "a number", value);
    switch (k->type) {
    case T_INT: {
        errno = 0;
        long v = strtol(value, &end, 10);
        if (!value[0] || *end || end == value) {
            double d = strtod(value, &end);
            if (value[0] && !*end && end != value && isfinite(d) && d == floor(d))
                return set_number(c, k, d, value, loc, err);  /* "1e3" */
            return failf(err, loc, "key '%s': expected an integer, got '%s'", k->name, value);
        }
        if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
            return range_error(err, loc, k, value);
        *KEY_INT(c, k) = (int)v;
        return 0;
    }
    case T_FLOAT: {
        errno = 0;
        double v = strtod(value, &end);
        if (!value[0] || *end || end == value || isnan(v))
            return failf(err, loc, "key '%s': expected a number, got '%s'", k->name, value);
        if (errno == ERANGE) return range_error(err, loc, k, value);   /* 1e-400 is not 0, nor 1e400 inf */
        return set_number(c, k, v, value, loc, err);
    }
    case T_BOOL:
        if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0) *KEY_INT(c, k) = 1;
        else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0) *KEY_INT(c, k) = 0;
        else
            return failf(err, loc, "key '%s': expected true or false (or 1 or 0), got '%s'",
                         k->name, value);
        return 0;
    case T_STR:
    case T_PATH:
        return set_string(c, k, value, k->type == T_PATH ? cwd : NULL, loc, err);
    }
    return 0;
}

/* Parse JSON text; on error fill err with "LOC:LINE: invalid JSON near '...' (expected ...)". */
static cJSON *parse_json(const char *text, size_t n, const char *loc, MhaError *err) {
    size_t at = 0;
    const char *expected = NULL;
    const unsigned char *u = (const unsigned char *)text;
    if (n >= 2 && (utf16_bom(text, n) || u[0] == 0 || u[1] == 0)) {   /* with a byte-order mark or without */
        failf(err, NULL, "%s: the config is UTF-16 (it starts with the bytes %02X %02X); expected UTF-8 JSON: "
              "convert it with 'iconv -f UTF-16 -t UTF-8 %s > NEW'", loc, u[0], u[1], loc);
        return NULL;
    }
    if (json_syntax_check(text, n, &at, &expected) == 0) {
        const long nul = json_nul_escape_at(text, n);
        if (nul >= 0) {   /* cJSON would end the string there: a path or name silently cut short */
            int line = 1;
            for (long i = 0; i < nul; i++) line += text[i] == '\n';
            failf(err, NULL, "%s:%d: a string holds \\u0000, a NUL character (expected names and paths "
                  "without one: remove it)", loc, line);
            return NULL;
        }
        const char *end = NULL;
        cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
        if (root) return root;
        /* the checker accepted what cJSON refused (limits): report cJSON's position */
        at = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        expected = "JSON that cJSON can parse";
    }
    int line = 1;
    for (size_t i = 0; i < at && i < n; i++) line += text[i] == '\n';
    if (at >= n) {
        failf(err, NULL, "%s:%d: invalid JSON at end of file (expected %s)", loc, line,
              expected);
        return NULL;
    }
    char near[32];
    json_excerpt(near, text, n, at);
    failf(err, NULL, "%s:%d: invalid JSON near '%s' (expected %s)", loc, line, near, expected);
    return NULL;
}

/* ---------------------------------------------------------------- applying a document */

/* "LOC:LINE" when line > 0, else LOC. */
static const char *at_line(char *buf, size_t size, const char *loc, int line) {
    if (line <= 0) return loc;
    snprintf(buf, size, "%s:%d", loc, line);
    return buf;
}

/* Set every key found in the JSON object root (sections of keys), parsed from text. With
 * key_lines (NKEYS entries, else NULL: no lines) an error names the line of the key it is
 * about, and key_lines[i] gets the line of key i for later messages (0: absent). */
static int apply_json(Config *c, const cJSON *root, const char *text, size_t n,
                      const char *base_dir, const char *loc, int *key_lines, MhaError *err) {
    if (!cJSON_IsObject(root))
        return failf(err, loc, "expected a JSON object with sections data, model, train, "
                     "output, got %s", json_type_name(root));
    unsigned char seen[NKEYS] = {0}, seen_sec[NSECTIONS] = {0};
    char where[4200];
    int top = 0;
    for (const cJSON *sec = root->child; sec; sec = sec->next, top++) {
        const char *sname = sec->string ? sec->string : "";
        const char *sloc = at_line(where, sizeof where, loc, key_lines ? json_member_line(text, n, top, -1) : 0);
        int s = find_section(sname);
        if (s < 0) return unknown_section(err, sloc, sname);
        if (seen_sec[s]++) return failf(err, sloc, "section '%s' appears twice", sname);
        if (!cJSON_IsObject(sec))
            return failf(err, sloc, "section '%s': expected an object, got %s", sname,
                         json_type_name(sec));
        int sub = 0;
        for (const cJSON *item = sec->child; item; item = item->next, sub++) {
            char dotted[160];
            snprintf(dotted, sizeof dotted, "%s.%s", sname, item->string ? item->string : "");
            int line = key_lines ? json_member_line(text, n, top, sub) : 0;
            const char *kloc = at_line(where, sizeof where, loc, line);
            int i = find_key(dotted);
            if (i < 0) return unknown_key(err, kloc, dotted);
            if (seen[i]++) return failf(err, kloc, "key '%s' appears twice", dotted);
            if (key_lines) key_lines[i] = line;
            int rc = set_from_json(c, &KEYS[i], item, base_dir, kloc, err);
            if (rc) return rc;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- validation */

static void divisor_examples(int d, int near, char *buf, size_t n) {
    int picks[4], np = 0;
    /* the (up to) 4 divisors of d closest to the requested count, in increasing order */
    for (int round = 0; round < 4; round++) {
        int best = -1;
        for (int v = 1; v <= d && v <= 65536; v++) {
            if (d % v) continue;
            int taken = 0;
            for (int j = 0; j < np; j++) taken |= picks[j] == v;
            if (taken) continue;
            if (best < 0 || abs(v - near) < abs(best - near)) best = v;
        }
        if (best < 0) break;
        picks[np++] = best;
    }
    for (int a = 0; a < np; a++)
        for (int b = a + 1; b < np; b++)
            if (picks[b] < picks[a]) { int t = picks[a]; picks[a] = picks[b]; picks[b] = t; }
    size_t used = 0;
    buf[0] = '\0';
    for (int j = 0; j < np && used < n; j++)
        used += (size_t)snprintf(buf + used, n - used, "%s%d", j ? ", " : "", picks[j]);
}

/* Validate c; on error *bad = index of the key the message is about and *other = that of the
 * second key of a relation between two (else -1). No location prefix. */
static int validate(const Config *c, MhaError *err, int *bad, int *other) {
    char text[64];
    *other = -1;
    for (int i = 0; i < NKEYS; i++) {
        const KeyDesc *k = &KEYS[i];
        *bad = i;
        switch (k->type) {
        case T_INT:
            if (k->range && !in_range(k, CKEY_INT(c, k))) {
                snprintf(text, sizeof text, "%d", CKEY_INT(c, k));
                return range_error(err, NULL, k, text);
            }
            break;
        case T_FLOAT:
            if (!in_range(k, CKEY_FLOAT(c, k))) {
                fmt_float(text, sizeof text, CKEY_FLOAT(c, k));
                return range_error(err, NULL, k, text);
            }
            break;
        case T_BOOL:
            if (CKEY_INT(c, k) != 0 && CKEY_INT(c, k) != 1)
                return failf(err, NULL, "key '%s': %d is not a boolean (allowed: true or false)",
                             k->name, CKEY_INT(c, k));
            break;
        case T_STR:
        case T_PATH: {
            const char *v = CKEY_STR(c, k);
            if (!memchr(v, '\0', k->size))
                return failf(err, NULL, "key '%s': value is not terminated", k->name);
            if (k->allowed) {
                int ok = 0;
                for (int a = 0; k->allowed[a]; a++) ok |= strcmp(v, k->allowed[a]) == 0;
                if (!ok) return enum_error(err, NULL, k, v);
            }
            break;
        }
        }
    }

    /* relations between keys */
    *bad = find_key("data.train");
    if (!c->train[0])
        return failf(err, NULL, "key 'data.train' is required (the training file; set it in "
                     "the config or with --set data.train=FILE)");
    *bad = find_key("output.dir");
    if (!c->out_dir[0])
        return failf(err, NULL, "key 'output.dir' is empty (expected the folder for the run's "
                     "checkpoints and metrics)");
    *bad = find_key("model.n_heads");
    *other = find_key("model.d_model");
    if (c->d_model % c->n_heads != 0) {
        char ex[64];
        divisor_examples(c->d_model, c->n_heads, ex, sizeof ex);
        return failf(err, NULL, "key 'model.n_heads': %d does not divide model.d_model = %d "
                     "(allowed: a divisor of d_model, e.g. %s)", c->n_heads, c->d_model, ex);
    }
    *bad = find_key("data.max_len");
    *other = find_key("model.pooling");
    if (strcmp(c->pooling, "cls") == 0 && c->max_len < 2)
        return failf(err, NULL, "key 'data.max_len': %d leaves no room for text after [CLS] "
                     "with model.pooling = \"cls\" (allowed: >= 2)", c->max_len);
    *bad = find_key("model.causal");
    *other = find_key("model.pooling");
    if (c->causal && strcmp(c->pooling, "cls") == 0)
        return failf(err, NULL, "key 'model.causal': true with model.pooling = \"cls\" would let "
                     "[CLS], the first position, attend only to itself, so the classifier could not see "
                     "the text (allowed with causal: pooling \"mean\" or \"max\")");
    *bad = find_key("train.warmup");
    *other = -1;
    if (c->warmup >= 1 && c->warmup != floorf(c->warmup)) {
        fmt_float(text, sizeof text, c->warmup);
        return failf(err, NULL, "key 'train.warmup': %s is not allowed (allowed: a fraction "
                     "0 <= value < 1, or a whole number of updates >= 1)", text);
    }
    *bad = *other = -1;
    return 0;
}

/* ---------------------------------------------------------------- public API */

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++) {
        const KeyDesc *k = &KEYS[i];
        switch (k->type) {
        case T_INT:
        case T_BOOL: *KEY_INT(c, k) = (int)k->def; break;
        case T_FLOAT: *KEY_FLOAT(c, k) = (float)k->def; break;
        case T_STR:
        case T_PATH: snprintf(KEY_STR(c, k), k->size, "%s", k->defs); break;
        }
    }
}

int config_validate(const Config *c, MhaError *err) {
    int bad, other;
    return validate(c, err, &bad, &other);
}

static int read_file(const char *path, char **out, size_t *out_len, MhaError *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return failf(err, path, "cannot read config (%s)", strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1 >= cap) {
            if (cap >= (size_t)64 << 20) {
                free(buf);
                fclose(f);
                return failf(err, path, "cannot read config (larger than 64 MiB)");
            }
            char *grown = realloc(buf, cap * 2);
            if (!grown) { free(buf); buf = NULL; break; }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) break;
    }
    int bad = !buf || ferror(f);
    int e = errno;
    fclose(f);
    if (bad) {
        free(buf);
        return failf(err, path, "cannot read config (%s)", buf ? strerror(e) : "out of memory");
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return 0;
}

/* Parse text at loc into c (already holding defaults); paths resolve against base_dir. */
static int apply_text(Config *c, const char *text, size_t n, const char *base_dir,
                      const char *loc, int *key_lines, MhaError *err) {
    if (utf8_bom_length(text, n)) {  /* UTF-8 byte order mark */
        char *copy = malloc(n - 2);
        if (!copy) return failf(err, loc, "out of memory");
        memcpy(copy, text + 3, n - 2);  /* includes the terminating NUL */
        int rc = apply_text(c, copy, n - 3, base_dir, loc, key_lines, err);
        free(copy);
        return rc;
    }
    cJSON *root = parse_json(text, n, loc, err);
    if (!root) return MHA_EXIT_USAGE;
    int rc = apply_json(c, root, text, n, base_dir, loc, key_lines, err);
    cJSON_Delete(root);
    return rc;
}

/* One --set KEY=VALUE: *key_index into KEYS and *value (after the '='), or an error. */
static int parse_override(const char *ov, int *key_index, const char **value, MhaError *err) {
    const char *eq = strchr(ov, '=');
    if (!eq || eq == ov) return failf(err, NULL, "--set '%s': expected key=value", ov);
    char key[160];
    if ((size_t)(eq - ov) >= sizeof key) return unknown_key(err, "--set", "(too long)");
    memcpy(key, ov, (size_t)(eq - ov));
    key[eq - ov] = '\0';
    *key_index = find_key(key);
    if (*key_index < 0) return unknown_key(err, "--set", key);
    *value = eq + 1;
    return 0;
}

/* The keys --set may change on --resume: how the run is carried out, not what it computes
 * (the model, the data and the optimisation stay as stored, so that the run goes on exactly). */
static const char *const RESUME_KEYS[] = {"train.device", "train.threads", "train.max_bad_steps"};

int config_apply_resume_sets(Config *c, const char *const *overrides, int n_overrides, MhaError *err) {
    const int n_allowed = (int)(sizeof RESUME_KEYS / sizeof *RESUME_KEYS);
    for (int o = 0; o < n_overrides; o++) {
        const char *ov = overrides[o];
        int i = -1;
        const char *value = NULL;
        int prc = parse_override(ov, &i, &value, err);
        if (prc) return prc;
        const char *key = KEYS[i].name;
        if (mha_name_index(key, RESUME_KEYS, n_allowed) < 0)
            return failf(err, NULL, "--set %s with --resume: %s changes the model, the data or the "
                         "optimisation, which a resumed run keeps as stored in its last.mha so that it goes "
                         "on exactly (with --resume, --set takes only train.device, train.threads and "
                         "train.max_bad_steps; to change %s, start a new run with --config)", key, key, key);
        int rc = set_from_text(c, &KEYS[i], value, ".", "--set", err);
        if (rc) return rc;
    }
    return config_validate(c, err);
}

int config_load(Config *c, const char *path, const char *const *overrides, int n_overrides,
                MhaError *err) {
    config_defaults(c);
    char *text = NULL;
    size_t n = 0;
    int rc = read_file(path, &text, &n, err);
    if (rc) return rc;
    if (n >= 8 && memcmp(text, "MHACKPT\n", 8) == 0) {   /* model/checkpoint.h's magic */
        free(text);
        char dir[4096];
        dir_of(path, dir, sizeof dir);
        return failf(err, NULL, "%s: an mha checkpoint, not a JSON config (mha-train --resume %s continues the run "
                     "in that folder from its last.mha; mha-predict --model %s --info --json shows the config it "
                     "holds)", path, dir, path);
    }
    /* where the working directory cannot be read (removed meanwhile), paths stay relative.
     * A config named through /dev or /proc (/dev/stdin, <(...)'s /dev/fd/N) is not in that
     * folder: relative to the folder of the file it stands for (/dev/stdin < cfg/c.json: cfg),
     * or, for a pipe, which has none, to the working directory */
    char dir[4096], base[4096], cwd[4096], real[PATH_MAX];
    if (strncmp(path, "/dev/", 5) == 0 || strncmp(path, "/proc/", 6) == 0) {
        struct stat st;
        if (realpath(path, real) && stat(real, &st) == 0 && S_ISREG(st.st_mode)) dir_of(real, dir, sizeof dir);
        else snprintf(dir, sizeof dir, ".");
    } else {
        dir_of(path, dir, sizeof dir);
    }
    if (absolute_dir(base, sizeof base, dir) != 0) snprintf(base, sizeof base, "%s", dir);
    if (absolute_dir(cwd, sizeof cwd, ".") != 0) snprintf(cwd, sizeof cwd, ".");
    int key_lines[NKEYS] = {0};
    rc = apply_text(c, text, n, base, path, key_lines, err);
    free(text);
    if (rc) return rc;

    unsigned char from_set[NKEYS] = {0};
    for (int o = 0; o < n_overrides; o++) {
        const char *ov = overrides[o];
        int i = -1;
        const char *value = NULL;
        int prc = parse_override(ov, &i, &value, err);
        if (prc) return prc;
        rc = set_from_text(c, &KEYS[i], value, cwd, "--set", err);
        if (rc) return rc;
        from_set[i] = 1;
    }
    /* the default output.dir (set by neither): in the working directory */
    char out[sizeof c->out_dir];
    if (c->out_dir[0] != '/' && resolve_path(out, sizeof out, cwd, c->out_dir) == 0)
        snprintf(c->out_dir, sizeof c->out_dir, "%s", out);

    int bad = -1, other = -1;
    MhaError tmp;
    rc = validate(c, &tmp, &bad, &other);
    if (!rc) return 0;
    if (bad >= 0 && from_set[bad]) return failf(err, "--set", "%s", tmp.msg);
    char buf[4200];   /* path:line, or the path alone for a key the file does not hold */
    const char *where = at_line(buf, sizeof buf, path, bad >= 0 ? key_lines[bad] : 0);
    if (other >= 0 && from_set[other])   /* the file's key is fine alone: say what changed it */
        return failf(err, where, "%s (%s comes from --set)", tmp.msg, KEYS[other].name);
    return failf(err, where, "%s", tmp.msg);
}

int config_from_json(Config *c, const char *json, const char *base_dir, MhaError *err) {
    const char *loc = "checkpoint config";
    config_defaults(c);
    if (!json) return failf(err, loc, "missing");
    int rc = apply_text(c, json, strlen(json), base_dir, loc, NULL, err);   /* its lines mean nothing to a user */
    if (rc) return rc;
    int bad, other;
    MhaError tmp;
    rc = validate(c, &tmp, &bad, &other);
    if (rc) return failf(err, loc, "%s", tmp.msg);
    return 0;
}

char *config_to_json(const Config *c) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    int ok = 1;
    for (int s = 0; s < NSECTIONS && ok; s++) {
        cJSON *sec = cJSON_AddObjectToObject(root, SECTIONS[s]);
        if (!sec) { ok = 0; break; }
        for (int i = 0; i < NKEYS && ok; i++) {
            const KeyDesc *k = &KEYS[i];
            if (!key_in_section(k, SECTIONS[s])) continue;
            const char *name = key_short(k);
            cJSON *item = NULL;
            char num[48];
            switch (k->type) {
            case T_INT: item = cJSON_AddNumberToObject(sec, name, CKEY_INT(c, k)); break;
            case T_FLOAT:
                /* shortest decimal of the float, so cJSON prints e.g. 0.1, not 0.100000001 */
                fmt_float(num, sizeof num, CKEY_FLOAT(c, k));
                item = cJSON_AddNumberToObject(sec, name, strtod(num, NULL));
                break;
            case T_BOOL: item = cJSON_AddBoolToObject(sec, name, CKEY_INT(c, k) != 0); break;
            case T_STR:
            case T_PATH: {
                char v[4096 + 1];
                snprintf(v, sizeof v, "%.*s", (int)(k->size - 1), CKEY_STR(c, k));
                item = cJSON_AddStringToObject(sec, name, v);
                break;
            }
            }
            if (!item) ok = 0;
        }
    }
    char *printed = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!printed) return NULL;
    char *out = strdup(printed);  /* plain malloc'd, whatever cJSON's hooks are */
    cJSON_free(printed);
    return out;
}

void config_print_help(FILE *f) {
    for (int i = 0; i < NKEYS; i++) {
        const KeyDesc *k = &KEYS[i];
        char def[64], allowed[512];
        static const char *const tnames[] = {"int", "float", "bool", "string", "path"};
        switch (k->type) {
        case T_INT: snprintf(def, sizeof def, "%d", (int)k->def); break;
        case T_FLOAT: fmt_float(def, sizeof def, (float)k->def); break;
        case T_BOOL: snprintf(def, sizeof def, "%s", k->def != 0 ? "true" : "false"); break;
        default: snprintf(def, sizeof def, "\"%s\"", k->defs); break;
        }
        allowed_text(k, allowed, sizeof allowed);
        fprintf(f, "  %-24s %-6s default %-14s %s", k->name, tnames[k->type], def, k->help);
        if (k->allowed || (k->type != T_STR && k->type != T_PATH && k->type != T_BOOL &&
                           k->range))
            fprintf(f, " (allowed: %s)", allowed);
        fputc('\n', f);
    }
}

void config_read_options(const Config *c, ReadOptions *o) {
    memset(o, 0, sizeof *o);
    o->format = format_from_name(c->format);
    o->tok.nfkc = c->nfkc;
    o->tok.casefold = c->casefold;
    o->tok.replace_invalid = c->replace_invalid;
    o->max_line_bytes = c->max_line_bytes;
}
