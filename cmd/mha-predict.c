/* cmd/mha-predict.c: labels text with a trained model, or evaluates a labelled file.
 *   mha-predict --model M [FILE|-]            label<TAB>prob per input line, in order
 *   mha-predict --model M --eval FILE [--json] accuracy, macro-F1, per-class, confusion
 * Input is streamed in chunks (memory stays flat); a chunk is also cut whenever no more
 * input is ready, so interactive pipes get answers line by line.
 * Exit status: 0 success, 1 runtime or data error, 2 usage error. */
#include "data/dataset.h"
#include "data/error.h"
#include "kernels/backend.h"
#include "model/checkpoint.h"
#include "model/classifier.h"
#include "model/config.h"
#include "model/evaluate.h"
#include "model/metrics.h"
#include "model/trainer.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK_LINES 2048
#define CHUNK_TOKENS (1 << 20)

static void usage(FILE *f) {
    fprintf(f,
            "usage: mha-predict --model M [options] [FILE|-]\n"
            "       mha-predict --model M --eval FILE [--json]\n"
            "\n"
            "Reads one text per line (plain text, or a training format whose label is ignored)\n"
            "from FILE or standard input and writes one line per input line, in order.\n"
            "\n"
            "  --model M          checkpoint written by mha-train (model.mha or last.mha)\n"
            "  --top-k K          K label/probability pairs per line (default 1)\n"
            "  --format F         output format: tsv (label<TAB>prob..., default) or jsonl\n"
            "  --attention        jsonl with each line's tokens and attention weights\n"
            "                     (attention[layer][head][query][key], materialising path)\n"
            "  --eval FILE        evaluate a labelled file: accuracy, macro-F1, per-class, confusion\n"
            "  --json             with --eval: one JSON object instead of the text report\n"
            "  --batch-size N     examples per forward pass (default 64)\n"
            "  --threads N        CPU threads (default: all cores)\n"
            "  --device D         cpu, cuda or auto (default cpu)\n"
            "  --precision P      fp32, bf16 or int8; default: the model's train.precision.\n"
            "                     bf16: bf16 products, fp32 accumulation (a CPU without AVX512_BF16\n"
            "                     runs fp32, with a note). int8 (cpu only): the linear layers in\n"
            "                     int8, inputs quantized per token, weights per output channel,\n"
            "                     the attention in bf16 (fp32 without AVX512_BF16); a CPU without\n"
            "                     AVX512_VNNI runs bf16, with a note\n"
            "  -h, --help         this text\n");
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "mha-predict: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run mha-predict --help for usage)\n");
    return MHA_EXIT_USAGE;
}

static int parse_int(const char *s, int lo, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < lo || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

/* Buffered line reader over a file descriptor that can tell whether more input is
 * ready without blocking, and bounds the bytes kept per line. */
typedef struct {
    int fd;
    char buf[1 << 16];
    size_t pos, len;
    int eof;
    int error;   /* errno of a failed read (then eof is set too) */
    char *line;  size_t cap;
} LineReader;

static int reader_fill(LineReader *r) {
    if (r->eof) return 0;
    ssize_t n;
    do n = read(r->fd, r->buf, sizeof r->buf); while (n < 0 && errno == EINTR);
    if (n < 0) r->error = errno;
    if (n <= 0) { r->eof = 1; return 0; }
    r->pos = 0;
    r->len = (size_t)n;
    return 1;
}

/* Next line without its newline, keeping at most max_bytes (the rest is skipped).
 * Returns its length, or -1 at end of input. */
static long reader_line(LineReader *r, size_t max_bytes, int *truncated) {
    size_t n = 0;
    int any = 0;
    *truncated = 0;
    for (;;) {
        if (r->pos == r->len && !reader_fill(r)) break;
        any = 1;
        char *start = r->buf + r->pos;
        char *nl = memchr(start, '\n', r->len - r->pos);
        size_t take = nl ? (size_t)(nl - start) : r->len - r->pos;
        size_t keep = take;
        if (n + keep > max_bytes) { keep = n < max_bytes ? max_bytes - n : 0; *truncated = 1; }
        if (n + keep + 1 > r->cap) {
            r->cap = (n + keep + 1) * 2;
            r->line = realloc(r->line, r->cap);
        }
        memcpy(r->line + n, start, keep);
        n += keep;
        r->pos += take + (nl ? 1 : 0);
        if (nl) break;
    }
    if (!any) return -1;
    if (!r->line) { r->cap = 1; r->line = malloc(1); }
    r->line[n] = 0;
    return (long)n;
}

static int reader_ready(LineReader *r) {
    if (r->pos < r->len) return 1;
    if (r->eof) return 1;
    struct pollfd p = {r->fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
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
    config_defaults(&p->cfg);
    if ((rc = config_from_json(&p->cfg, p->ck.config_json, "", err))) {
        char inner[1800];
        snprintf(inner, sizeof inner, "%.1700s", err->msg);
        return mha_fail(err, MHA_EXIT_DATA, "%s: the stored config is not valid (%s)", path, inner);
    }
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
    }
    if (precision) snprintf(p->cfg.precision, sizeof p->cfg.precision, "%s", precision);
    if (!be && (rc = select_backend(&p->cfg, &be, "--device", err))) return rc;
    ModelDims d;
    model_dims_from_config(&d, &p->cfg, vocab_size(p->ck.vocab), p->ck.labels.n);
    d.dropout = d.attn_dropout = 0.0f;
    if (attention) d.fused_attention = 0;  /* only the materialising path keeps the weights */
    p->batch_size = batch_size;
    if ((rc = model_create(&p->model, &d, be, batch_size, p->cfg.max_len, 0, 0, err))) return rc;
    if (p->ck.n_params != p->model.lay.total)
        return mha_fail(err, MHA_EXIT_DATA, "%s: checkpoint holds %zu parameters but its config describes %zu "
                        "(corrupt or from another version)", path, p->ck.n_params, p->model.lay.total);
    be->to_device(p->model.params, p->ck.params, p->ck.n_params * sizeof(float));
    config_read_options(&p->cfg, &p->ro);
    p->ro.format = FORMAT_AUTO;     /* the input's own format, whatever the training file's was */
    p->ro.tok.replace_invalid = 1;  /* never stops on a bad byte: counted and said on stderr */
    p->add_cls = strcmp(p->cfg.pooling, "cls") == 0;
    p->truncate = strcmp(p->cfg.truncate, "head_tail") == 0 ? TRUNC_HEAD_TAIL : TRUNC_HEAD;
    return 0;
}

static void free_predictor(Predictor *p) {
    model_destroy(&p->model);
    checkpoint_free(&p->ck);
}

/* A growing dataset of unlabelled examples for one chunk of input lines. */
typedef struct { Dataset ds; int cap_n; int64_t cap_ids; TokenList toks; } Chunk;

/* Appends one line's tokens; returns how many of them the vocabulary knows (c->toks.replaced
 * tells whether the text held invalid UTF-8). */
static int chunk_add(Chunk *c, const Vocab *v, const char *text, const TokenizerOptions *to) {
    MhaError e;
    if (c->ds.n + 1 > c->cap_n) {
        c->cap_n = c->cap_n ? c->cap_n * 2 : 256;
        c->ds.labels = realloc(c->ds.labels, (size_t)c->cap_n * sizeof *c->ds.labels);
        c->ds.offsets = realloc(c->ds.offsets, (size_t)(c->cap_n + 1) * sizeof *c->ds.offsets);
        c->ds.line_no = realloc(c->ds.line_no, (size_t)c->cap_n * sizeof *c->ds.line_no);
    }
    if (c->ds.n == 0) c->ds.offsets[0] = 0;
    int64_t at = c->ds.offsets[c->ds.n];
    c->toks.n = 0;
    if (tokenize(to, text, strlen(text), &c->toks, &e) != 0) c->toks.n = 0;
    if (at + c->toks.n > c->cap_ids) {
        c->cap_ids = (at + c->toks.n) * 2 + 1024;
        c->ds.ids = realloc(c->ds.ids, (size_t)c->cap_ids * sizeof *c->ds.ids);
    }
    int known = 0;
    for (int i = 0; i < c->toks.n; i++) {
        c->ds.ids[at + i] = vocab_lookup(v, c->toks.text + c->toks.start[i], c->toks.len[i]);
        known += c->ds.ids[at + i] != VOCAB_UNK;
    }
    c->ds.labels[c->ds.n] = -1;
    c->ds.line_no[c->ds.n] = c->ds.n + 1;
    c->ds.offsets[c->ds.n + 1] = at + c->toks.n;
    c->ds.n++;
    return known;
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

typedef struct { int k; float p; } Ranked;
static int by_prob_desc(const void *a, const void *b) {
    float x = ((const Ranked *)a)->p, y = ((const Ranked *)b)->p;
    return (x < y) - (x > y);
}

static void write_predictions(Predictor *p, Chunk *c, float *probs, int top_k, int jsonl) {
    int K = p->model.d.K;
    Ranked *r = malloc((size_t)K * sizeof *r);
    AttentionDump dump = {p->ck.vocab, NULL, NULL, 0};
    if (p->attention) dump.items = calloc((size_t)c->ds.n, sizeof *dump.items);
    predict_dataset(&p->model, &c->ds, p->batch_size, p->cfg.max_len, p->truncate, p->add_cls, probs,
                    p->attention ? attention_sink : NULL, &dump);
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
    int truncated, write_failed = 0;
    long len;
    MhaError e;
    while ((len = reader_line(lr, (size_t)p->ro.max_line_bytes, &truncated)) >= 0) {
        char *line = lr->line;
        line_no++;
        truncated_lines += truncated;
        if (memchr(line, 0, (size_t)len)) {   /* NUL bytes: read as spaces, counted */
            for (long k = 0; k < len; k++) if (!line[k]) line[k] = ' ';
            nul_lines++;
        }
        if (line_no == 1 && (unsigned char)line[0] == 0xEF && (unsigned char)line[1] == 0xBB &&
            (unsigned char)line[2] == 0xBF)
            line += 3;
        size_t ll = strlen(line);
        if (ll > 0 && line[ll - 1] == '\r') line[ll - 1] = 0;
        if (format < 0 && line[0]) format = detect_format(line);
        char *label = NULL, *text = line;
        if (format > 0 && format != FORMAT_PLAIN && parse_line(line, format, &label, &text, &e) != 0)
            text = line;  /* not in the detected format: take the whole line as text */
        unknown_lines += chunk_add(&c, p->ck.vocab, text ? text : "", &p->ro.tok) == 0;
        if (c.toks.replaced && bad_utf8_lines++ == 0)
            fprintf(stderr, "mha-predict: %s:%ld: invalid UTF-8 (bad bytes are read as U+FFFD; the "
                    "model expects UTF-8: if the input is GBK, convert it with iconv -f GBK -t UTF-8); "
                    "further such lines are counted\n", name, line_no);
        /* a chunk is also cut at CHUNK_TOKENS, so memory stays flat with long lines too */
        if (c.ds.n == CHUNK_LINES || c.ds.offsets[c.ds.n] >= CHUNK_TOKENS || !reader_ready(lr)) {
            write_predictions(p, &c, probs, top_k, jsonl);
            c.ds.n = 0;
            if (ferror(stdout)) { write_failed = errno ? errno : EIO; break; }
        }
    }
    errno = 0;
    if (c.ds.n && !write_failed) write_predictions(p, &c, probs, top_k, jsonl);
    if (!write_failed && (fflush(stdout) != 0 || ferror(stdout))) write_failed = errno ? errno : EIO;
    if (nul_lines)
        fprintf(stderr, "mha-predict: %s: %ld lines held NUL bytes (read as spaces)\n", name, nul_lines);
    if (truncated_lines)
        fprintf(stderr, "mha-predict: %s: %ld lines longer than %d bytes were truncated\n", name,
                truncated_lines, p->ro.max_line_bytes);
    if (bad_utf8_lines)
        fprintf(stderr, "mha-predict: %s: %ld of %ld lines held invalid UTF-8\n", name, bad_utf8_lines,
                line_no);
    if (unknown_lines)
        fprintf(stderr, "mha-predict: %s: %ld of %ld lines had no character the model knows (empty, or "
                "all out of vocabulary): their labels are guesses\n", name, unknown_lines, line_no);
    if (lr->fd != STDIN_FILENO) close(lr->fd);
    int read_error = lr->error;
    free(lr->line);
    free(lr);
    free(probs);
    token_list_free(&c.toks);
    free(c.ds.labels);
    free(c.ds.offsets);
    free(c.ds.line_no);
    free(c.ds.ids);
    if (write_failed)
        return mha_fail(err, MHA_EXIT_DATA, "cannot write predictions to standard output (%s)",
                        strerror(write_failed));
    if (read_error) return mha_fail(err, MHA_EXIT_DATA, "%s: read error (%s)", name, strerror(read_error));
    return 0;
}

static int run_eval(Predictor *p, const char *path, int json, MhaError *err) {
    Dataset ds;
    int rc = dataset_load(path, &p->ro, p->ck.vocab, &p->ck.labels, &ds, err);
    if (rc) return rc;
    if (ds.n_replaced)
        fprintf(stderr, "mha-predict: %s: %ld of %ld lines held invalid UTF-8 or NUL bytes (read as "
                "U+FFFD; the model expects UTF-8: if the file is GBK, convert it with iconv -f GBK "
                "-t UTF-8)\n", path, ds.n_replaced, ds.n_lines);
    if (ds.n == 0) { dataset_free(&ds); return mha_fail(err, MHA_EXIT_DATA, "%s: no labelled examples", path); }
    Metrics m;
    evaluate_dataset(&p->model, &ds, p->batch_size, p->cfg.max_len, p->truncate, p->add_cls, &m);
    if (json) {
        char *s = metrics_to_json(&m, p->ck.labels.names);
        printf("%s\n", s);
        free(s);
    } else {
        printf("%s\n", path);
        metrics_print(&m, p->ck.labels.names, stdout);
    }
    metrics_free(&m);
    dataset_free(&ds);
    return 0;
}

int main(int argc, char **argv) {
    mha_cpu_prefer_passive_wait(argv);
    const char *model = NULL, *input = NULL, *eval = NULL, *format = "tsv", *device = "cpu", *precision = NULL;
    int top_k = 1, json = 0, batch_size = 64, threads = 0, attention = 0;
    const char *prediction_option = NULL;   /* an option that only predictions take */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--attention")) { attention = 1; continue; }
        if (!strcmp(a, "-")) {
            if (input) return usage_error("more than one input file given ('%s')", a);
            input = a;
            continue;
        }
        if (a[0] == '-' && a[1] != '-') return usage_error("unknown option '%s' (options are spelled --name)", a);
        if (a[0] == '-' && a[1] == '-') {
            const char *opts[] = {"--model", "--top-k", "--format", "--eval", "--batch-size", "--threads", "--device", "--precision"};
            int known = 0;
            for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) known |= !strcmp(a, opts[k]);
            if (!known) return usage_error("unknown option '%s'", a);
            if (i + 1 >= argc) return usage_error("%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--model")) model = v;
            else if (!strcmp(a, "--eval")) eval = v;
            else if (!strcmp(a, "--device")) device = v;
            else if (!strcmp(a, "--precision")) precision = v;
            else if (!strcmp(a, "--format")) { format = v; prediction_option = a; }
            else if (!strcmp(a, "--top-k")) {
                prediction_option = a;
                if (parse_int(v, 1, &top_k)) return usage_error("--top-k '%s': expected a positive integer", v);
            }
            else if (!strcmp(a, "--batch-size") && parse_int(v, 1, &batch_size)) return usage_error("--batch-size '%s': expected a positive integer", v);
            else if (!strcmp(a, "--threads") && parse_int(v, 0, &threads)) return usage_error("--threads '%s': expected a non-negative integer", v);
            continue;
        }
        if (input) return usage_error("more than one input file given ('%s')", a);
        input = a;
    }
    if (!model) return usage_error("%s", "missing --model M (a checkpoint written by mha-train)");
    if (strcmp(format, "tsv") && strcmp(format, "jsonl")) return usage_error("--format '%s': expected tsv or jsonl", format);
    if (strcmp(device, "cpu") && strcmp(device, "cuda") && strcmp(device, "auto")) return usage_error("--device '%s': expected cpu, cuda or auto", device);
    if (precision && strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "int8"))
        return usage_error("--precision '%s': expected fp32, bf16 or int8", precision);
    if (precision && !strcmp(precision, "int8") && strcmp(device, "cpu"))
        return usage_error("--precision int8 runs on the cpu only (drop --device %s)", device);
    if (eval && input) return usage_error("--eval reads its own file; drop the extra input '%s'", input);
    if (attention && eval) return usage_error("%s", "--attention goes with predictions, not --eval");
    if (prediction_option && eval)
        return usage_error("%s goes with predictions, not --eval (--json gives the report as JSON)", prediction_option);
    if (attention) format = "jsonl";
    if (json && !eval) return usage_error("%s", "--json goes with --eval (use --format jsonl for predictions)");

    Predictor p;
    MhaError err = {0};
    int rc = load_predictor(&p, model, batch_size, threads, device, precision, attention, &err);
    if (rc == 0) rc = eval ? run_eval(&p, eval, json, &err) : run_predict(&p, input, top_k, !strcmp(format, "jsonl"), &err);
    free_predictor(&p);
    errno = 0;
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))   /* --eval report on a full disk */
        rc = mha_fail(&err, MHA_EXIT_DATA, "cannot write to standard output (%s)", strerror(errno ? errno : EIO));
    if (rc) fprintf(stderr, "mha-predict: error: %s\n", err.msg);
    return rc;
}
