/* cmd/mha-predict.c: labels text with a trained model, or evaluates a labelled file.
 *   mha-predict --model M [FILE|-]            label<TAB>prob per input line, in order
 *   mha-predict --model M --eval FILE|- [--json] accuracy, macro-F1, per-class, confusion
 *   mha-predict --model M --info [--json]     what the model is (cmd/model_info.c)
 * M is a checkpoint or a run's folder (resolve_model); label<TAB>text input whose columns look
 * swapped is refused (check_not_swapped, and the dataset reader for --eval).
 * Input is streamed in chunks (memory stays flat); a chunk is also cut whenever no more
 * input is ready, so interactive pipes get answers line by line (cmd/line_reader.c).
 * Exit status: 0 success, 1 runtime or data error, 2 usage error. */
#include "cmd/line_reader.h"
#include "cmd/model_info.h"
#include "data/dataset.h"
#include "data/error.h"
#include "data/line_format.h"
#include "data/utf8.h"
#include "kernels/backend.h"
#include "model/checkpoint.h"
#include "model/classifier.h"
#include "model/config.h"
#include "model/device.h"
#include "model/evaluate.h"
#include "model/metrics.h"
#include "version.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_LINES 2048
#define CHUNK_TOKENS (1 << 20)

static void usage(FILE *f) {
    fprintf(f,
            "usage: mha-predict --model M [options] [FILE|-]\n"
            "       mha-predict --model M --eval FILE|- [--json]\n"
            "       mha-predict --model M --info [--json]\n"
            "\n"
            "Reads one text per line (plain text, or a training format whose label is ignored)\n"
            "from FILE or standard input and writes one line per input line, in order.\n"
            "Options take their value as --name VALUE or --name=VALUE; -- ends them.\n"
            "\n"
            "  --model M          checkpoint written by mha-train (model.mha or last.mha), or a\n"
            "                     run's output folder (its model.mha)\n"
            "  --top-k K          K label/probability pairs per line (default 1)\n"
            "  --format F         output format: tsv (label<TAB>prob..., default) or jsonl\n"
            "  --input-format F   how input lines are read: auto (default: from the first non-empty\n"
            "                     line, with a note when it is not plain text), plain (whole line\n"
            "                     is the text), tsv, fasttext or jsonl (the label is ignored).\n"
            "                     With --eval: the labelled file's format (plain is not allowed)\n"
            "  --attention        jsonl with each line's tokens and attention weights\n"
            "                     (attention[layer][head][query][key], materialising path)\n"
            "  --eval FILE        evaluate a labelled file (- for standard input): accuracy,\n"
            "                     macro-F1, per-class, confusion. Lines with a label the model\n"
            "                     was not trained on count as errors (their labels as classes)\n"
            "  --json             with --eval or --info: one JSON object instead of the text report\n"
            "  --info             describe the model instead: classes, vocabulary, shape and\n"
            "                     parameters, training settings, the update its parameters are\n"
            "                     from and their dev scores (a last.mha: the run's position)\n"
            "  --batch-size N     examples per forward pass at most (default 64)\n"
            "  --batch-tokens N   padded tokens per forward pass at most (one longer text still\n"
            "                     makes a batch; 0: no cap). Default on the cpu: about 1 MiB of\n"
            "                     the widest activation, at least 256 (512 tokens at d_model\n"
            "                     128, d_ff 512), which keeps each thread's pass in its cache;\n"
            "                     other devices, and --attention: no cap\n"
            "  --threads N        CPU threads (default: all cores)\n"
            "  --device D         cpu, cuda or auto (default cpu)\n"
            "  --precision P      fp32, bf16 or int8; default: the model's train.precision.\n"
            "                     bf16: bf16 products, fp32 accumulation (a CPU without AVX512_BF16\n"
            "                     runs fp32, with a note). int8 (cpu only): the linear layers in\n"
            "                     int8, inputs quantized per token, weights per output channel,\n"
            "                     the attention in bf16 (fp32 without AVX512_BF16); a CPU without\n"
            "                     AVX512_VNNI runs bf16, with a note. A CPU with AMX runs both on\n"
            "                     its tiles, where bf16 is the fastest (MHA_CPU_AMX=0: no tiles)\n"
            "  -h, --help         this text\n"
            "  --version          the version and the commit it was built from\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mha-predict: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(run mha-predict --help for usage)\n");
    va_end(ap);
    return MHA_EXIT_USAGE;
}

/* Count messages read "1 line was", "2 lines were". */
static const char *lines_word(long n) { return n == 1 ? "line" : "lines"; }
static const char *was_were(long n) { return n == 1 ? "was" : "were"; }

#define MAX_COUNT_OPTION 1000000           /* --top-k, --batch-size, --batch-tokens */
#define MAX_THREADS_OPTION MHA_MAX_THREADS   /* --threads, as train.threads */

/* *out = s, an integer in [lo, hi]; -1 when s is anything else. */
static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || errno || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

typedef struct {
    Config cfg;
    Checkpoint ck;
    Model model;
    ReadOptions ro;
    int add_cls, truncate, batch_size;
    int attention;        /* dump attention weights (runs the materialising path) */
} Predictor;

static int load_predictor(Predictor *p, const char *path, int batch_size, int threads, const char *device,
                          const char *precision, int attention, MhaError *err) {
    int rc;
    memset(p, 0, sizeof *p);
    p->attention = attention;
    if ((rc = checkpoint_load(path, &p->ck, err))) return rc;
    if ((rc = checkpoint_config(&p->ck, &p->cfg, path, err))) return rc;
    /* the parameter count must match before a model of the stored size is allocated */
    if ((rc = checkpoint_check_layout(&p->ck, &p->cfg, path, err))) return rc;
    p->cfg.threads = threads;
    snprintf(p->cfg.device, sizeof p->cfg.device, "%s", device);
    const Backend *be = NULL;
    if (precision && !strcmp(precision, "int8")) {
        char why[256] = "";
        if (!(be = mha_cpu_backend_int8(threads, why, sizeof why)))
            fprintf(stderr, "mha-predict: note: precision \"int8\": %s; running in bf16 (or fp32)\n", why);
        precision = "bf16";  /* the table int8 builds on, and the fallback */
        snprintf(p->cfg.device, sizeof p->cfg.device, "cpu");   /* (--device auto: the cpu) */
    }
    if (precision) snprintf(p->cfg.precision, sizeof p->cfg.precision, "%s", precision);
    if (!be && (rc = select_backend(&p->cfg, &be, "--device", err))) return rc;
    ModelDims d;
    model_dims_from_config(&d, &p->cfg, vocab_size(p->ck.vocab), p->ck.labels.n);
    d.dropout = d.attn_dropout = 0.0f;
    if (attention) d.fused_attention = 0;  /* only the materialising path keeps the weights */
    p->batch_size = batch_size;
    if ((rc = model_create_forward_only(&p->model, &d, be, batch_size, p->cfg.max_len, err))) return rc;
    if (p->ck.n_params != p->model.lay.total)
        return mha_fail(err, MHA_EXIT_DATA, "%s: checkpoint holds %zu parameters but its config describes %zu "
                        "(corrupt or from another version)", path, p->ck.n_params, p->model.lay.total);
    be->to_device(p->model.params, p->ck.params, p->ck.n_params * sizeof(float));
    /* the parameters stay as loaded: a backend may keep what it derives from them */
    if (be->weights_fixed) be->weights_fixed(p->model.params, p->ck.n_params * sizeof(float));
    config_read_options(&p->cfg, &p->ro);
    p->ro.format = FORMAT_AUTO;     /* main sets --input-format's */
    p->ro.tok.replace_invalid = 1;  /* never stops on a bad byte: counted and said on stderr */
    p->add_cls = strcmp(p->cfg.pooling, "cls") == 0;
    p->truncate = strcmp(p->cfg.truncate, "head_tail") == 0 ? TRUNC_HEAD_TAIL : TRUNC_HEAD;
    return 0;
}

static void free_predictor(Predictor *p) {
    if (p->model.be && p->model.be->weights_fixed) p->model.be->weights_fixed(NULL, 0);
    model_destroy(&p->model);
    checkpoint_free(&p->ck);
}

/* A growing dataset of unlabelled examples for one chunk of input lines (emptied by setting
 * ds.n to 0; its arrays are kept for the next chunk). */
typedef struct { Dataset ds; TokenList toks; } Chunk;

/* Appends one line's tokens; *known: how many of them the vocabulary knows (c->toks.replaced
 * tells whether the text held invalid UTF-8). Returns 0, or MHA_EXIT_DATA with the error
 * naming the input (and the line when the tokenizer refused it) when out of memory. */
static int chunk_add(Chunk *c, const Vocab *v, const char *text, const TokenizerOptions *to,
                     const char *name, long line_no, int *known, MhaError *err) {
    c->toks.n = 0;
    *known = 0;
    MhaError e;
    if (tokenize(to, text, strlen(text), &c->toks, &e) != 0)
        return mha_fail(err, MHA_EXIT_DATA, "%s:%ld: %s", name, line_no, e.msg);
    int32_t *ids;
    int rc = dataset_append(&c->ds, -1, c->ds.n + 1, c->toks.n, &ids, name, err);
    if (rc) return rc;
    *known = 0;
    for (int i = 0; i < c->toks.n; i++) {
        ids[i] = vocab_lookup(v, c->toks.text + c->toks.start[i], c->toks.len[i]);
        *known += ids[i] != VOCAB_UNK;
    }
    return 0;
}

/* Per chunk: the tokens and attention weights of each example as JSON, by index. */
typedef struct { const Vocab *vocab; cJSON **items; float *buf; size_t buf_len; } AttentionDump;

static void attention_sink(void *ctx, const Model *m, const Batch *b, int row, const float *probs, float loss) {
    AttentionDump *a = ctx;
    (void)probs;
    (void)loss;
    int len = b->lengths[row], L = m->d.L, NH = m->d.NH;
    size_t need = (size_t)L * NH * len * len;
    if (need > a->buf_len) { a->buf = realloc(a->buf, need * sizeof(float)); a->buf_len = need; }
    model_attention_weights(m, row, len, a->buf);
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    for (int t = 0; t < len; t++)
        cJSON_AddItemToArray(tokens, cJSON_CreateString(vocab_token(a->vocab, b->ids[(size_t)row * b->T + t])));
    cJSON *att = cJSON_AddArrayToObject(o, "attention");
    for (int l = 0; l < L; l++) {
        cJSON *layer = cJSON_CreateArray();
        for (int h = 0; h < NH; h++) {
            cJSON *head = cJSON_CreateArray();
            for (int i = 0; i < len; i++) {
                cJSON *q = cJSON_CreateArray();
                for (int j = 0; j < len; j++) {
                    float w = a->buf[(((size_t)l * NH + h) * len + i) * len + j];
                    cJSON_AddItemToArray(q, cJSON_CreateNumber(round(w * 1e4) / 1e4));
                }
                cJSON_AddItemToArray(head, q);
            }
            cJSON_AddItemToArray(layer, head);
        }
        cJSON_AddItemToArray(att, layer);
    }
    a->items[b->index[row]] = o;
}

/* A probability with the 6 decimals the tsv output prints (a float printed as a double
 * would show digits that mean nothing: 0.99999904632568359). */
static double round6(float p) { return round((double)p * 1e6) / 1e6; }

/* Classes ranked by probability, highest first; exact ties by class index, lowest first (the
 * rule evaluate.c's argmax follows, so the printed label is the one --eval scores). The index
 * decides ties here, not the order qsort leaves equal elements in, which C leaves open. */
typedef struct { int k; float p; } Ranked;
static int by_prob_desc(const void *a, const void *b) {
    const Ranked *x = a, *y = b;
    if (x->p != y->p) return (x->p < y->p) - (x->p > y->p);
    return (x->k > y->k) - (x->k < y->k);
}

/* Runs the model over the chunk, ranks each example's classes and prints its top_k (tsv, or
 * jsonl with the attention weights when asked) to standard output, in input order. */
static int predict_and_print_chunk(Predictor *p, Chunk *c, float *probs, int top_k, int jsonl, MhaError *err) {
    int K = p->model.d.K;
    Ranked *r = malloc((size_t)K * sizeof *r);
    AttentionDump dump = {p->ck.vocab, NULL, NULL, 0};
    if (p->attention) dump.items = calloc((size_t)c->ds.n, sizeof *dump.items);
    if (!probs || !r || (p->attention && !dump.items) ||
        predict_dataset(&p->model, &c->ds, p->batch_size, p->cfg.max_len, p->truncate, p->add_cls, probs,
                        p->attention ? attention_sink : NULL, &dump) != EVAL_OK) {
        free(r);
        free(dump.items);
        free(dump.buf);
        return mha_fail(err, MHA_EXIT_DATA, "out of memory predicting a chunk of %d lines (batches of %d x %d "
                        "tokens; try a smaller --batch-size)", c->ds.n, p->batch_size, p->cfg.max_len);
    }
    for (int i = 0; i < c->ds.n; i++) {
        for (int k = 0; k < K; k++) r[k] = (Ranked){k, probs[(size_t)i * K + k]};
        qsort(r, (size_t)K, sizeof *r, by_prob_desc);
        int n = top_k < K ? top_k : K;
        if (jsonl) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "label", p->ck.labels.names[r[0].k]);
            cJSON_AddNumberToObject(o, "prob", round6(r[0].p));
            cJSON *top = cJSON_AddArrayToObject(o, "top");
            for (int j = 0; j < n; j++) {
                cJSON *t = cJSON_CreateObject();
                cJSON_AddStringToObject(t, "label", p->ck.labels.names[r[j].k]);
                cJSON_AddNumberToObject(t, "prob", round6(r[j].p));
                cJSON_AddItemToArray(top, t);
            }
            if (dump.items && dump.items[i]) {
                cJSON_AddItemToObject(o, "tokens", cJSON_DetachItemFromObject(dump.items[i], "tokens"));
                cJSON_AddItemToObject(o, "attention", cJSON_DetachItemFromObject(dump.items[i], "attention"));
                cJSON_Delete(dump.items[i]);
            }
            char *s = cJSON_PrintUnformatted(o);
            fputs(s, stdout);
            fputc('\n', stdout);
            free(s);
            cJSON_Delete(o);
        } else {
            for (int j = 0; j < n; j++)
                printf("%s%s\t%.6f", j ? "\t" : "", p->ck.labels.names[r[j].k], r[j].p);
            putchar('\n');
        }
    }
    fflush(stdout);
    free(r);
    free(dump.items);
    free(dump.buf);
    return 0;
}

/* What a line of `format` looks like, for the count of lines that were not. */
static const char *format_label(int format) {
    switch (format) {
    case FORMAT_TSV: return "TSV (label<TAB>text)";
    case FORMAT_FASTTEXT: return "fastText (__label__NAME text)";
    case FORMAT_JSONL: return "JSON Lines with a \"text\" string";
    default: return "in the input's format";
    }
}

/* Auto-detection reads the whole input by its first non-empty line: a stray tab there makes
 * every line lose its first column as a "label". Said once, with the way to turn it off. */
static void note_detected_format(const char *name, long line_no, int format) {
    const char *as, *why, *effect;
    switch (format) {
    case FORMAT_TSV:
        as = "TSV", why = "has a tab";
        effect = "the first column of each line is a label and is ignored";
        break;
    case FORMAT_FASTTEXT:
        as = "fastText", why = "starts with __label__";
        effect = "the __label__ words of each line are labels and are ignored";
        break;
    case FORMAT_JSONL:
        as = "JSON Lines", why = "starts with '{'";
        effect = "each line's \"text\" field is read, the rest is ignored";
        break;
    default:
        return;   /* plain text: every line is read whole, nothing to say */
    }
    fprintf(stderr, "mha-predict: note: %s: read as %s (line %ld %s): %s; give --input-format plain "
            "to read whole lines as text\n", name, as, line_no, why, effect);
}

/* Fewer TSV lines than this before the first answer (an interactive pipe answers line by line):
 * too few to call the columns swapped. */
#define SWAP_MIN_LINES 20

/* label<TAB>text input whose second column is (nearly) always a class name and whose first is
 * not has its columns swapped: the predictions would be of the labels. Judged on the lines
 * read before the first answer (a file's first 2048 lines; on a pipe, those that had come). */
static int check_not_swapped(const Predictor *p, const char *name, long n, long text_is_class,
                             long label_is_class, long first, MhaError *err) {
    if (n < SWAP_MIN_LINES || !columns_look_swapped(n, text_is_class, label_is_class)) return 0;
    char known[512];
    labelmap_list(&p->ck.labels, known, sizeof known);
    return mha_fail(err, MHA_EXIT_DATA, "%s: the columns look swapped: in %ld of %ld lines the second column "
                    "(the text, in label<TAB>text) is a label of the model (%s) and the first is not (first: "
                    "line %ld); expected the text alone or 'label<TAB>text': swap the columns with "
                    SWAP_COLUMNS_HINT ", or keep the text alone with cut -f1 FILE > NEW", name, text_is_class, n,
                    known, first);
}

static int run_predict(Predictor *p, const char *input, int top_k, int jsonl, MhaError *err) {
    LineReader *lr = calloc(1, sizeof *lr);
    lr->fd = STDIN_FILENO;
    const char *name = "<stdin>";
    if (input && strcmp(input, "-") != 0) {
        lr->fd = open(input, O_RDONLY | O_CLOEXEC);
        name = input;
        if (lr->fd < 0) {
            int e = errno;
            free(lr);
            return mha_fail(err, MHA_EXIT_DATA, "%s: cannot open (%s)", input, strerror(e));
        }
    }
    Chunk c;
    memset(&c, 0, sizeof c);
    float *probs = malloc((size_t)CHUNK_LINES * p->model.d.K * sizeof(float));
    int format = p->ro.format == FORMAT_AUTO ? -1 : p->ro.format;
    long line_no = 0, truncated_lines = 0, nul_lines = 0, bad_utf8_lines = 0, unknown_lines = 0;
    long unparsed_lines = 0, first_unparsed = 0;
    char unparsed_why[512] = "";
    /* label<TAB>text lines before the first answer: how many have a class name as the text, as
     * the label (columns swapped?), and the first of the former */
    long tsv_lines = 0, text_is_class = 0, label_is_class = 0, first_swapped = 0;
    int swap_checked = 0;
    int truncated, write_failed = 0, rc = 0;
    long len;
    char *fix = NULL;   /* a line's text with its invalid UTF-8 replaced (3 x its bytes at most) */
    size_t fix_cap = 0;
    MhaError e;
    /* data.max_line_bytes bounds a line's text, as in training; the raw line may be longer
     * by its label and JSON's escapes (\uXXXX: 6 bytes for a 2- or 3-byte character, 12 for
     * a 4-byte one): 3 x the text and 64 KiB for the rest. A line cut at that bound (its text
     * far over the limit) is read as its format allows: JSON then fails to parse (counted). */
    const size_t text_max = (size_t)p->ro.max_line_bytes, line_max = 3 * text_max + 65536;
    while ((len = line_reader_next(lr, line_max, &truncated)) >= 0) {
        char *line = lr->line;
        line_no++;
        if (line_no == 1 && is_checkpoint_first_line(line, (size_t)len)) {   /* mha-predict --model M M */
            rc = mha_fail(err, MHA_EXIT_DATA, "%s: an mha checkpoint, not text to label (the model goes in "
                          "--model; the input holds one text per line)", name);
            break;
        }
        if (line_no == 1 && utf16_bom(line, (size_t)len)) {   /* before any answer: its 0x0A bytes are no line ends */
            rc = mha_fail(err, MHA_EXIT_DATA,
                          "%s: the input is UTF-16 (it starts with the byte-order mark %02X %02X); expected "
                          "UTF-8: convert it with 'iconv -f UTF-16 -t UTF-8 %s > NEW'", name,
                          (unsigned char)line[0], (unsigned char)line[1], lr->fd == STDIN_FILENO ? "FILE" : name);
            break;
        }
        if (memchr(line, 0, (size_t)len)) {   /* NUL bytes: read as spaces, counted */
            for (long k = 0; k < len; k++) if (!line[k]) line[k] = ' ';
            nul_lines++;
        }
        /* a byte-order mark starts the input, or a line of a file that 'cat a b' made */
        line += utf8_bom_length(line, strlen(line));
        size_t ll = strlen(line);
        if (ll > 0 && line[ll - 1] == '\r') line[ll - 1] = 0;
        const int blank = utf8_is_blank(line);   /* as training's empty lines: spaces, zero-width characters */
        if (format < 0 && !blank) {
            format = detect_format(line);
            note_detected_format(name, line_no, format);
        }
        char *text = line;
        if (format > 0 && format != FORMAT_PLAIN && !blank && parse_text(line, format, &text, &e) != 0) {
            text = line;  /* not in the input's format: the whole line is the text, counted */
            if (unparsed_lines++ == 0) {
                first_unparsed = line_no;
                snprintf(unparsed_why, sizeof unparsed_why, "%.480s", e.msg);
            }
        } else if (format == FORMAT_TSV && !blank && !swap_checked && !is_ascii_number(line)) {
            /* line: the label column now; a first column of digits is an id, not a text
             * (id<TAB>label is not text<TAB>label swapped: left out of the count) */
            const int t = labelmap_find_trimmed(&p->ck.labels, text, strlen(text)) >= 0;
            const int l = labelmap_find_trimmed(&p->ck.labels, line, strlen(line)) >= 0;
            tsv_lines++;
            text_is_class += t;
            label_is_class += l;
            if (t && !l && !first_swapped) first_swapped = line_no;
        }
        /* a text over the limit is read as training and --eval read it: bad bytes become U+FFFD,
         * then the cut (a cut first would back over a run of stray continuation bytes and the
         * character before); shorter texts go to the tokenizer as they are, which does the same */
        size_t tlen = text ? strlen(text) : 0;
        int fixed = 0;
        if (text && tlen > text_max && utf8_check(text, tlen) < tlen) {
            /* only what the cut keeps: text_max bytes of it come from at most text_max bytes of the
             * line (a replacement is never shorter than what it replaces); 4 more, so that a
             * character the prefix ends inside lands after the cut (the buffer: 3 x that at most) */
            if (tlen > text_max + 4) tlen = text_max + 4;
            if (fix_cap < 3 * tlen + 1) {
                free(fix);
                fix_cap = 3 * tlen + 1;
                if (!(fix = malloc(fix_cap))) {
                    fix_cap = 0;
                    rc = mha_fail(err, MHA_EXIT_DATA, "%s:%ld: out of memory reading a line", name, line_no);
                    break;
                }
            }
            tlen = utf8_replace_invalid(text, tlen, fix, 0);
            fix[tlen] = '\0';
            text = fix;
            fixed = 1;
        }
        if (text && tlen > text_max) {
            text[utf8_cut(text, text_max)] = '\0';
            truncated = 1;
        }
        truncated_lines += truncated;
        int known;
        if ((rc = chunk_add(&c, p->ck.vocab, text ? text : "", &p->ro.tok, name, line_no, &known, err))) break;
        unknown_lines += known == 0;
        if ((fixed || c.toks.replaced) && bad_utf8_lines++ == 0)
            fprintf(stderr, "mha-predict: %s:%ld: invalid UTF-8 (bad bytes are read as U+FFFD; the "
                    "model expects UTF-8: if the input is GBK, convert it with iconv -f GBK -t UTF-8); "
                    "further such lines are counted\n", name, line_no);
        /* a chunk is also cut at CHUNK_TOKENS, so memory stays flat with long lines too */
        if (c.ds.n == CHUNK_LINES || c.ds.offsets[c.ds.n] >= CHUNK_TOKENS || !line_reader_ready(lr)) {
            if (!swap_checked && (swap_checked = 1) &&
                (rc = check_not_swapped(p, name, tsv_lines, text_is_class, label_is_class, first_swapped, err)))
                break;
            if ((rc = predict_and_print_chunk(p, &c, probs, top_k, jsonl, err))) break;
            c.ds.n = 0;
            if (ferror(stdout)) { write_failed = errno ? errno : EIO; break; }
        }
    }
    errno = 0;
    if (c.ds.n && !write_failed && !rc && !swap_checked)
        rc = check_not_swapped(p, name, tsv_lines, text_is_class, label_is_class, first_swapped, err);
    if (c.ds.n && !write_failed && !rc) rc = predict_and_print_chunk(p, &c, probs, top_k, jsonl, err);
    if (!write_failed && (fflush(stdout) != 0 || ferror(stdout))) write_failed = errno ? errno : EIO;
    if (nul_lines)
        fprintf(stderr, "mha-predict: %s: %ld %s held NUL bytes (read as spaces; UTF-16 text without a "
                "byte-order mark converts with 'iconv -f UTF-16LE -t UTF-8 %s > NEW', or UTF-16BE)\n", name,
                nul_lines, lines_word(nul_lines), lr->fd == STDIN_FILENO ? "FILE" : name);
    if (unparsed_lines)
        fprintf(stderr, "mha-predict: %s: %ld of %ld %s %s not %s (first: line %ld: %s); %s read whole as "
                "text\n", name, unparsed_lines, line_no, lines_word(line_no), was_were(unparsed_lines), format_label(format),
                first_unparsed, unparsed_why, unparsed_lines == 1 ? "it was" : "they were");
    if (truncated_lines)
        fprintf(stderr, "mha-predict: %s: %ld %s with text longer than %d bytes %s truncated\n", name,
                truncated_lines, lines_word(truncated_lines), p->ro.max_line_bytes, was_were(truncated_lines));
    if (bad_utf8_lines)
        fprintf(stderr, "mha-predict: %s: %ld of %ld %s held invalid UTF-8\n", name, bad_utf8_lines,
                line_no, lines_word(line_no));
    if (unknown_lines)
        fprintf(stderr, "mha-predict: %s: %ld of %ld %s had no character the model knows (empty, or "
                "all out of vocabulary): %s\n", name, unknown_lines, line_no, lines_word(line_no),
                unknown_lines == 1 ? "its label is a guess" : "their labels are guesses");
    if (lr->fd != STDIN_FILENO) close(lr->fd);
    int read_error = lr->error;
    free(lr->line);
    free(lr);
    free(fix);
    free(probs);
    token_list_free(&c.toks);
    dataset_free(&c.ds);
    if (rc) return rc;
    if (write_failed)
        return mha_fail(err, MHA_EXIT_DATA, "cannot write predictions to standard output (%s)",
                        strerror(write_failed));
    if (read_error) return mha_fail(err, MHA_EXIT_DATA, "%s: read error (%s)", name, strerror(read_error));
    return 0;
}

/* The reader's counts of lines it changed, on stderr: evaluated all the same. */
static void report_eval_counts(const Dataset *ds, const char *name, int max_line_bytes) {
    if (ds->n_replaced)
        fprintf(stderr, "mha-predict: %s: %ld of %ld %s held invalid UTF-8 or NUL bytes (read as "
                "U+FFFD and spaces; the model expects UTF-8: if the file is GBK, convert it with iconv -f GBK "
                "-t UTF-8)\n", name, ds->n_replaced, ds->n_lines, lines_word(ds->n_lines));
    if (ds->n_long)
        fprintf(stderr, "mha-predict: %s: %ld %s with text longer than %d bytes (the model's "
                "data.max_line_bytes) %s truncated, as in training\n", name, ds->n_long,
                lines_word(ds->n_long), max_line_bytes, was_were(ds->n_long));
}

/* Lines whose label the model was not trained on: evaluated (every one an error), said once. */
static void note_unknown_labels(const Dataset *ds, const char *name) {
    if (!ds->n_unknown_label) return;
    char seen[768];
    dataset_unknown_labels_summary(ds, 5, seen, sizeof seen);
    const long n = ds->n_known_label + ds->n_unknown_label;
    fprintf(stderr, "mha-predict: note: %s: %ld of %ld %s %s a label the model was not trained on (first: line "
            "%ld): %s. %s: in accuracy's denominator, and each label as a class of its own (recall 0, F1 0) "
            "in macro-F1; the loss leaves %s out\n", name, ds->n_unknown_label, n,
            lines_word(n), ds->n_unknown_label == 1 ? "has" : "have", ds->first_unknown_label, seen,
            ds->n_unknown_label == 1 ? "It is predicted and counts as an error" : "They are predicted and count as errors",
            ds->n_unknown_label == 1 ? "it" : "them");
}

static int run_eval(Predictor *p, const char *path, int json, MhaError *err) {
    Dataset ds;
    int from_stdin = strcmp(path, "-") == 0;
    const char *name = from_stdin ? "<stdin>" : path;
    /* standard input is read through /dev/stdin (descriptor 0 itself: a pipe or socket works too) */
    p->ro.keep_unknown_labels = 1;   /* classes K, K + 1, ...: wrong whatever the model predicts */
    int rc = dataset_load_named(from_stdin ? "/dev/stdin" : path, name, &p->ro, p->ck.vocab, &p->ck.labels,
                                &ds, err);
    if (rc) return rc;
    report_eval_counts(&ds, name, p->ro.max_line_bytes);
    dataset_print_notes(&ds, name, "mha-predict", stderr);
    if (ds.n == 0) { dataset_free(&ds); return mha_fail(err, MHA_EXIT_DATA, "%s: no labelled examples", name); }
    note_unknown_labels(&ds, name);
    /* the report's classes: the model's, then the labels it does not know (the metrics' K + j) */
    const int K = p->ck.labels.n, U = dataset_unknown_label_count(&ds);
    char **names = malloc((size_t)(K + U) * sizeof *names);
    Metrics m;
    if (!names ||
        evaluate_dataset(&p->model, &ds, p->batch_size, p->cfg.max_len, p->truncate, p->add_cls, &m) != EVAL_OK) {
        free(names);
        dataset_free(&ds);
        return mha_fail(err, MHA_EXIT_DATA, "%s: out of memory evaluating in batches of %d x %d tokens (try a "
                        "smaller --batch-size)", name, p->batch_size, p->cfg.max_len);
    }
    for (int k = 0; k < K; k++) names[k] = p->ck.labels.names[k];
    for (int j = 0; j < U; j++) names[K + j] = (char *)dataset_unknown_label(&ds, j, NULL);
    if (json) {
        char *s = metrics_to_json(&m, names);
        printf("%s\n", s);
        free(s);
    } else {
        printf("%s\n", name);
        metrics_print(&m, names, stdout);
    }
    free(names);
    metrics_free(&m);
    dataset_free(&ds);
    return 0;
}

/* --model ARG: a checkpoint, or a run's output folder (its model.mha), into path. A model.mha
 * that is missing where a last.mha lies beside it belongs to a run that has not finished (or
 * was stopped before it saved one): an error that names both ways on, except for --info on
 * the folder, which describes that last.mha. Other failures are left to checkpoint_load,
 * which names them. */
static int resolve_model(const char *arg, int info, char *path, size_t cap, MhaError *err) {
    if (!arg) return mha_fail(err, MHA_EXIT_USAGE, "--model is required (see mha-predict --help)");
    struct stat st;
    char dir[4096];
    size_t n = strlen(arg);
    if (n >= sizeof dir - 16) { snprintf(path, cap, "%s", arg); return 0; }
    const int is_dir = stat(arg, &st) == 0 && S_ISDIR(st.st_mode);
    if (is_dir) {
        while (n > 1 && arg[n - 1] == '/') n--;   /* DIR/ -> DIR */
        snprintf(dir, sizeof dir, "%.*s", (int)n, arg);
        snprintf(path, cap, "%s/model.mha", dir);
    } else {
        snprintf(path, cap, "%s", arg);
        if (stat(arg, &st) == 0 || errno != ENOENT) return 0;   /* there: checkpoint_load reads or refuses it */
        const char *slash = strrchr(arg, '/');
        if (slash) snprintf(dir, sizeof dir, "%.*s", slash == arg ? 1 : (int)(slash - arg), arg);
        else snprintf(dir, sizeof dir, ".");
        /* only a missing model.mha is the unfinished run's: another name is a typo, which
         * checkpoint_load reports as such */
        if (strcmp(slash ? slash + 1 : arg, "model.mha") != 0) return 0;
    }
    if (stat(path, &st) == 0 || errno != ENOENT) return 0;
    char last[4200];
    snprintf(last, sizeof last, "%s%slast.mha", dir, dir[strlen(dir) - 1] == '/' ? "" : "/");
    if (stat(last, &st) == 0 && S_ISREG(st.st_mode) && info && is_dir) {   /* --info RUN_DIR: the run so far */
        snprintf(path, cap, "%s", last);
        return 0;
    }
    if (stat(last, &st) == 0 && S_ISREG(st.st_mode))
        return mha_fail(err, MHA_EXIT_DATA, "%s: no such file: the run in %s has not finished (or was stopped "
                        "before it saved its model): %s holds its latest parameters (mha-predict --model %s), "
                        "or finish the run with mha-train --resume %s", path, dir, last, last, last);
    if (is_dir)
        return mha_fail(err, MHA_EXIT_DATA, "%s is a folder, not a regular file, and holds no model.mha or "
                        "last.mha (expected an mha checkpoint, or the output folder of an mha-train run)", dir);
    return 0;
}

/* The command line, as parsed. */
typedef struct {
    const char *model, *input, *eval, *format, *device, *precision, *input_format;
    int top_k, json, batch_size, batch_tokens, threads, attention, info, help, version;   /* batch_tokens -1: automatic */
    const char *prediction_option;   /* an option that only predictions take */
    const char *run_option;          /* an option that only predictions and --eval take */
    unsigned given;                  /* bit k: value option OPTIONS[k] was given (each once) */
} Args;

/* Every option: the first N_VALUE_OPTIONS take a value, the rest are flags. */
static const char *const OPTIONS[] = {"--model", "--top-k", "--format", "--input-format", "--eval", "--batch-size",
                                      "--batch-tokens", "--threads", "--device", "--precision", "--json",
                                      "--attention", "--info", "--help", "--version"};
#define N_VALUE_OPTIONS 10
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof *OPTIONS))
/* Index of name in OPTIONS, or -1. */
#define option_index(name) mha_name_index(name, OPTIONS, N_OPTIONS)

/* Stores the value v of the value option `opt` (one of the first N_VALUE_OPTIONS). */
static int set_value(Args *a, const char *opt, const char *v) {
    if (strcmp(opt, "--model") && strcmp(opt, "--eval") && strcmp(opt, "--format") && strcmp(opt, "--top-k"))
        a->run_option = OPTIONS[option_index(opt)];   /* (opt may be the caller's buffer) */
    if (!strcmp(opt, "--model")) a->model = v;
    else if (!strcmp(opt, "--eval")) a->eval = v;
    else if (!strcmp(opt, "--device")) a->device = v;
    else if (!strcmp(opt, "--precision")) a->precision = v;
    else if (!strcmp(opt, "--input-format")) a->input_format = v;
    else if (!strcmp(opt, "--format")) { a->format = v; a->prediction_option = "--format"; }
    else if (!strcmp(opt, "--top-k")) {
        a->prediction_option = "--top-k";
        if (parse_int(v, 1, MAX_COUNT_OPTION, &a->top_k))
            return usage_error("--top-k '%s': expected an integer from 1 to %d", v, MAX_COUNT_OPTION);
    }
    else if (!strcmp(opt, "--batch-size") && parse_int(v, 1, MAX_COUNT_OPTION, &a->batch_size))
        return usage_error("--batch-size '%s': expected an integer from 1 to %d", v, MAX_COUNT_OPTION);
    else if (!strcmp(opt, "--batch-tokens") && parse_int(v, 0, MAX_COUNT_OPTION, &a->batch_tokens))
        return usage_error("--batch-tokens '%s': expected an integer from 0 (no cap) to %d", v, MAX_COUNT_OPTION);
    else if (!strcmp(opt, "--threads") && parse_int(v, 0, MAX_THREADS_OPTION, &a->threads))
        return usage_error("--threads '%s': expected an integer from 0 (all cores) to %d", v, MAX_THREADS_OPTION);
    return 0;
}

/* One "--name", "--name VALUE" or "--name=VALUE" at argv[*i]; advances *i past a separate value. */
static int parse_long_option(Args *a, int argc, char **argv, int *i) {
    const char *arg = argv[*i], *eq = strchr(arg, '=');
    char name[64];
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof name) return usage_error("unknown option '%s'", arg);
    memcpy(name, arg, len);
    name[len] = 0;
    const int k = option_index(name);
    if (k >= N_VALUE_OPTIONS) {
        if (eq) return usage_error("%s takes no value (got '%s'; give %s alone)", name, arg, name);
        if (!strcmp(name, "--json")) a->json = 1;
        else if (!strcmp(name, "--attention")) a->attention = 1;
        else if (!strcmp(name, "--info")) a->info = 1;
        else if (!strcmp(name, "--version")) a->version = 1;
        else a->help = 1;
        return 0;
    }
    if (k < 0) {
        const char *near = mha_did_you_mean(name, OPTIONS, N_OPTIONS);
        if (near) return usage_error("unknown option '%s' (did you mean '%s'?)", arg, near);
        return usage_error("unknown option '%s'", arg);
    }
    if (eq && !eq[1]) return usage_error("%s needs a value after '=' (got '%s')", name, arg);
    if (!eq && *i + 1 >= argc) return usage_error("%s needs a value", name);
    if (a->given & (1u << k)) return usage_error("%s is given twice; give it once", name);
    a->given |= 1u << k;
    const char *v = eq ? eq + 1 : argv[++*i];
    if (!*v) return usage_error("%s needs a value (got an empty one)", name);   /* --model "" */
    return set_value(a, name, v);
}

static int parse_args(Args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->device = "cpu";
    a->input_format = "auto";
    a->top_k = 1;
    a->batch_size = 64;
    a->batch_tokens = -1;
    int options_end = 0;   /* after "--", every argument is the input */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int rc = 0;
        if (options_end) {
            if (a->input) return usage_error("more than one input file given ('%s')", arg);
            a->input = arg;
        } else if (!strcmp(arg, "--")) options_end = 1;
        else if (!strcmp(arg, "-h")) a->help = 1;
        else if (arg[0] == '-' && arg[1] == '-') rc = parse_long_option(a, argc, argv, &i);
        else if (arg[0] == '-' && arg[1]) return usage_error("unknown option '%s' (options are spelled --name)", arg);
        else if (a->input) return usage_error("more than one input file given ('%s')", arg);
        else a->input = arg;
        if (rc) return rc;
        if (a->help || a->version) return 0;
    }
    return 0;
}

/* Values and combinations that parse_args cannot judge one option at a time. */
static int check_args(Args *a, int *input_format) {
    const char *format = a->format ? a->format : "tsv";
    if (!a->model) return usage_error("%s", "missing --model M (a checkpoint written by mha-train)");
    if (strcmp(format, "tsv") && strcmp(format, "jsonl")) return usage_error("--format '%s': expected tsv or jsonl", format);
    if (strcmp(a->device, "cpu") && strcmp(a->device, "cuda") && strcmp(a->device, "auto"))
        return usage_error("--device '%s': expected cpu, cuda or auto", a->device);
    if (a->precision && strcmp(a->precision, "fp32") && strcmp(a->precision, "bf16") && strcmp(a->precision, "int8"))
        return usage_error("--precision '%s': expected fp32, bf16 or int8", a->precision);
    if (a->precision && !strcmp(a->precision, "int8") && !strcmp(a->device, "cuda"))
        return usage_error("%s", "--precision int8 runs on the cpu only (drop --device cuda)");
    if ((*input_format = format_from_name(a->input_format)) < 0)
        return usage_error("--input-format '%s': expected auto, plain, tsv, fasttext or jsonl", a->input_format);
    if (a->info && a->input) return usage_error("--info describes the model and reads no input; drop the input '%s'", a->input);
    if (a->info && (a->eval || a->attention || a->prediction_option || a->run_option))
        return usage_error("--info describes the model and runs nothing; drop %s",
                           a->eval ? "--eval" : a->attention ? "--attention" : a->prediction_option ? a->prediction_option
                                                                                                    : a->run_option);
    if (a->eval && a->input) return usage_error("--eval reads its own file; drop the extra input '%s'", a->input);
    if (a->attention && a->eval) return usage_error("%s", "--attention goes with predictions, not --eval");
    if (a->prediction_option && a->eval)
        return usage_error("%s goes with predictions, not --eval (--json gives the report as JSON)", a->prediction_option);
    if (a->eval && *input_format == FORMAT_PLAIN)
        return usage_error("%s", "--input-format plain goes with predictions: --eval needs labelled lines "
                           "(give auto, tsv, fasttext or jsonl)");
    if (a->attention && a->format && strcmp(a->format, "jsonl"))
        return usage_error("--attention writes JSON Lines; drop --format %s", format);
    if (a->json && !a->eval && !a->info)
        return usage_error("%s", "--json goes with --eval or --info (use --format jsonl for predictions)");
    a->format = a->attention ? "jsonl" : format;
    return 0;
}

int main(int argc, char **argv) {
    mha_guard_std_fds();
    mha_cpu_set_thread_wait(argv);
    signal(SIGXFSZ, SIG_IGN);   /* over `ulimit -f`: a write error, said, rather than a silent death */
    Args a;
    int input_format = FORMAT_AUTO, rc;
    if ((rc = parse_args(&a, argc, argv))) return rc;
    if (a.help) { usage(stdout); return 0; }
    if (a.version) { printf("mha-predict %s\n", MHA_VERSION); return 0; }
    if ((rc = check_args(&a, &input_format))) return rc;

    Predictor p;
    MhaError err = {0};
    char model[4200];
    format_hint_set_cli(1);   /* a line in another format: "give --input-format ..." */
    if ((rc = resolve_model(a.model, a.info, model, sizeof model, &err))) {
        fprintf(stderr, "mha-predict: error: %s\n", err.msg);
        return rc;
    }
    if (a.info) {
        errno = 0;
        if ((rc = model_info_print(model, a.json, stdout, &err)) == 0 && (fflush(stdout) != 0 || ferror(stdout)))
            rc = mha_fail(&err, MHA_EXIT_DATA, "cannot write to standard output (%s)", strerror(errno ? errno : EIO));
        if (rc) fprintf(stderr, "mha-predict: error: %s\n", err.msg);
        return rc;
    }
    rc = load_predictor(&p, model, a.batch_size, a.threads, a.device, a.precision, a.attention, &err);
    p.ro.format = input_format;   /* auto: each input's own format, whatever the training file's was */
    if (rc == 0)   /* on the cpu by default: batches that keep a thread's forward pass in its cache */
        evaluate_set_max_tokens(a.batch_tokens >= 0 ? a.batch_tokens
                                : strcmp(p.model.be->name, "cpu") == 0 ? evaluate_cpu_max_tokens(p.model.d.C, p.model.d.F)
                                                                        : 0);
    if (rc == 0)
        rc = a.eval ? run_eval(&p, a.eval, a.json, &err)
                    : run_predict(&p, a.input, a.top_k, !strcmp(a.format, "jsonl"), &err);
    free_predictor(&p);
    errno = 0;
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))   /* --eval report on a full disk */
        rc = mha_fail(&err, MHA_EXIT_DATA, "cannot write to standard output (%s)", strerror(errno ? errno : EIO));
    if (rc) fprintf(stderr, "mha-predict: error: %s\n", err.msg);
    return rc;
}
