/* model/checkpoint.c: writing (atomically) and reading (defensively) checkpoints. */
#include "model/checkpoint.h"
#include <cjson/cJSON.h>
#include "model/params.h"
#include "data/little_endian.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The format is little-endian: integers are written with explicit byte order, but the float
 * sections (parameters, moments) and the labels blob as the host holds them. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mha checkpoints are little-endian; this host is not (see model/checkpoint.c)"
#endif

static const char MAGIC[8] = {'M', 'H', 'A', 'C', 'K', 'P', 'T', '\n'};
enum { TAG_CONFIG = 1, TAG_VOCAB, TAG_LABELS, TAG_PARAMS, TAG_ADAM_M, TAG_ADAM_V, TAG_STATE, TAG_ORIGIN };
#define HEADER_BYTES 24u
#define SECTION_HEADER_BYTES 16u
#define MAX_CHECKPOINT_BYTES ((uint64_t)16 << 30)

uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* ---- writing ---- */

typedef struct { FILE *f; uint32_t crc; int failed; } Writer;

static void write_bytes(Writer *w, const void *p, size_t n) {
    if (w->failed || n == 0) return;
    if (fwrite(p, 1, n, w->f) != n) w->failed = errno ? errno : EIO;
    w->crc = crc32_update(w->crc, p, n);
}
static void write_u32(Writer *w, uint32_t v) {
    unsigned char b[4];
    put_u32(b, v);
    write_bytes(w, b, 4);
}
static void write_u64(Writer *w, uint64_t v) {
    write_u32(w, (uint32_t)v);
    write_u32(w, (uint32_t)(v >> 32));
}
static void write_section(Writer *w, uint32_t tag, const void *p, uint64_t n) {
    write_u32(w, tag);
    write_u32(w, 0);
    write_u64(w, n);
    write_bytes(w, p, (size_t)n);
}

static unsigned char *labels_blob(const LabelMap *m, size_t *len) {
    size_t n = 4;
    for (int i = 0; i < m->n; i++) n += 4 + strlen(m->names[i]);
    unsigned char *b = malloc(n), *p = b;
    if (!b) return NULL;
    uint32_t k = (uint32_t)m->n;
    memcpy(p, &k, 4); p += 4;
    for (int i = 0; i < m->n; i++) {
        uint32_t l = (uint32_t)strlen(m->names[i]);
        memcpy(p, &l, 4); p += 4;
        memcpy(p, m->names[i], l); p += l;
    }
    *len = n;
    return b;
}

/* fsync's errors that mean "this file cannot be synced" (some FUSE and network file systems,
 * special files), not "the data was lost". */
static int fsync_unsupported(int e) {
    return e == EINVAL || e == ENOTSUP || e == EOPNOTSUPP || e == ENOSYS;
}

void checkpoint_temp_name(char *out, size_t cap, const char *name) {
    snprintf(out, cap, ".%s.tmp.%ld", name, (long)getpid());
}

int checkpoint_save_at(int dir_fd, const char *name, const char *path, const Checkpoint *ck, MhaError *err) {
    unsigned char *vocab = NULL, *labels = NULL;
    size_t vocab_len = 0, labels_len = 0;
    if (vocab_serialize(ck->vocab, &vocab, &vocab_len) != 0 || !(labels = labels_blob(&ck->labels, &labels_len))) {
        free(vocab);
        return mha_fail(err, MHA_EXIT_DATA, "%s: out of memory while writing the checkpoint", path);
    }
    int has_train = ck->adam_m && ck->adam_v && ck->state_json;
    uint32_t n_sections = (has_train ? 7 : 4) + (ck->origin_json != NULL);
    size_t pbytes = ck->n_params * sizeof(float);
    uint64_t size = HEADER_BYTES + (uint64_t)n_sections * SECTION_HEADER_BYTES + strlen(ck->config_json) +
                    vocab_len + labels_len + pbytes + 4;
    if (has_train) size += 2 * (uint64_t)pbytes + strlen(ck->state_json);
    if (ck->origin_json) size += strlen(ck->origin_json);

    char tmp[512];   /* .NAME.tmp.PID, inside the folder dir_fd holds */
    checkpoint_temp_name(tmp, sizeof tmp, name);
    int fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = 0;
    if (fd < 0) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: cannot create the temporary checkpoint file %s beside it (%s)", path,
                      tmp, strerror(errno));
        goto done;
    }
    Writer w = {fdopen(fd, "wb"), 0, 0};
    if (!w.f) {
        int e = errno;
        close(fd);
        unlinkat(dir_fd, tmp, 0);
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: cannot write checkpoint (%s)", path, strerror(e));
        goto done;
    }
    write_bytes(&w, MAGIC, 8);
    write_u32(&w, CHECKPOINT_VERSION);
    write_u32(&w, n_sections);
    write_u64(&w, size);
    write_section(&w, TAG_CONFIG, ck->config_json, strlen(ck->config_json));
    write_section(&w, TAG_VOCAB, vocab, vocab_len);
    write_section(&w, TAG_LABELS, labels, labels_len);
    write_section(&w, TAG_PARAMS, ck->params, pbytes);
    if (has_train) {
        write_section(&w, TAG_ADAM_M, ck->adam_m, pbytes);
        write_section(&w, TAG_ADAM_V, ck->adam_v, pbytes);
        write_section(&w, TAG_STATE, ck->state_json, strlen(ck->state_json));
    }
    if (ck->origin_json) write_section(&w, TAG_ORIGIN, ck->origin_json, strlen(ck->origin_json));
    uint32_t crc = w.crc;
    write_u32(&w, crc);
    if (!w.failed && fflush(w.f) != 0) w.failed = errno;
    /* a file system that cannot fsync (EINVAL, ENOTSUP) keeps the file all the same */
    if (!w.failed && fsync(fileno(w.f)) != 0 && !fsync_unsupported(errno)) w.failed = errno;
    if (fclose(w.f) != 0 && !w.failed) w.failed = errno;
    if (w.failed) {
        unlinkat(dir_fd, tmp, 0);
        if (faccessat(dir_fd, name, F_OK, 0) == 0)
            rc = mha_fail(err, MHA_EXIT_DATA, "%s: cannot write checkpoint (%s); the previous %s is untouched",
                          path, strerror(w.failed), path);
        else
            rc = mha_fail(err, MHA_EXIT_DATA, "%s: cannot write checkpoint (%s)", path, strerror(w.failed));
        goto done;
    }
    if (renameat(dir_fd, tmp, dir_fd, name) != 0) {
        int e = errno;
        unlinkat(dir_fd, tmp, 0);
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: cannot rename %s into place (%s)", path, tmp, strerror(e));
        goto done;
    }
    /* the rename made durable where the file system can; a failure here (EINVAL on some file
     * systems, or an I/O error) is not reported: the checkpoint itself is whole and in place */
    (void)fsync(dir_fd);
done:
    free(vocab);
    free(labels);
    return rc;
}

int checkpoint_save(const char *path, const Checkpoint *ck, MhaError *err) {
    char *dircopy = strdup(path), *basecopy = strdup(path);
    if (!dircopy || !basecopy) {
        free(dircopy);
        free(basecopy);
        return mha_fail(err, MHA_EXIT_DATA, "%s: out of memory while writing the checkpoint", path);
    }
    int rc, dir_fd = open(dirname(dircopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0)
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: cannot open the folder to write the checkpoint in (%s)", path,
                      strerror(errno));
    else {
        rc = checkpoint_save_at(dir_fd, basename(basecopy), path, ck, err);
        close(dir_fd);
    }
    free(dircopy);
    free(basecopy);
    return rc;
}

/* ---- reading ---- */

static uint64_t get_u64(const unsigned char *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

static char *dup_text(const unsigned char *p, uint64_t n) {
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    memcpy(s, p, (size_t)n);
    s[n] = 0;
    return s;
}

static float *dup_floats(const unsigned char *p, uint64_t n) {
    float *f = malloc(n ? (size_t)n : 1);
    if (f) memcpy(f, p, (size_t)n);
    return f;
}

static int parse_labels(LabelMap *m, const unsigned char *p, uint64_t n, const char *path, MhaError *err) {
    m->n = 0;
    m->names = NULL;
    if (n < 4) return mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (label section too short)", path);
    uint32_t k = get_u32(p);
    if (k == 0 || k > (n - 4) / 4)
        return mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (label count %u does not fit the section)", path, k);
    m->names = calloc(k, sizeof *m->names);
    if (!m->names) return mha_fail(err, MHA_EXIT_DATA, "%s: out of memory", path);
    uint64_t off = 4;
    for (uint32_t i = 0; i < k; i++) {
        if (n - off < 4) goto bad;
        uint32_t l = get_u32(p + off);
        off += 4;
        if (l > n - off) goto bad;
        if (l == 0 || memchr(p + off, 0, l)) {
            labelmap_free(m);
            return mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (label %u is empty or holds a NUL byte)",
                            path, i);
        }
        m->names[i] = dup_text(p + off, l);
        m->n = (int)i + 1;
        if (!m->names[i]) {
            labelmap_free(m);
            return mha_fail(err, MHA_EXIT_DATA, "%s: out of memory reading the labels", path);
        }
        if (i > 0 && strcmp(m->names[i - 1], m->names[i]) >= 0) {
            labelmap_free(m);
            return mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (labels not sorted and distinct at "
                            "label %u; expected the order mha-train writes)", path, i);
        }
        off += l;
    }
    if (off != n) goto bad;
    return 0;
bad:
    labelmap_free(m);
    return mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (label lengths overrun the section)", path);
}

int checkpoint_load(const char *path, Checkpoint *ck, MhaError *err) {
    memset(ck, 0, sizeof *ck);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return mha_fail(err, MHA_EXIT_DATA, "%s: cannot open checkpoint (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mha_fail(err, MHA_EXIT_DATA, "%s: not a regular file (expected an mha checkpoint)", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return mha_fail(err, MHA_EXIT_DATA, "%s: cannot open checkpoint (%s)", path, strerror(errno));
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < HEADER_BYTES + 4) {
        fclose(f);
        return mha_fail(err, MHA_EXIT_DATA, "%s: file is %llu bytes, too short to be an mha checkpoint "
                        "(truncated or not a checkpoint)", path, (unsigned long long)size);
    }
    if (size > MAX_CHECKPOINT_BYTES) {
        fclose(f);
        return mha_fail(err, MHA_EXIT_DATA, "%s: file is %llu bytes, larger than any mha checkpoint", path,
                        (unsigned long long)size);
    }
    unsigned char *buf = malloc((size_t)size);
    if (!buf) { fclose(f); return mha_fail(err, MHA_EXIT_DATA, "%s: out of memory reading the checkpoint", path); }
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    int rc = 0;
    if (got != size) { rc = mha_fail(err, MHA_EXIT_DATA, "%s: read error", path); goto out; }
    if (memcmp(buf, MAGIC, 8) != 0) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: not an mha checkpoint (bad magic; expected a file written by mha-train)", path);
        goto out;
    }
    uint32_t version = get_u32(buf + 8), n_sections = get_u32(buf + 12);
    if (version != CHECKPOINT_VERSION) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: checkpoint format version %u, this mha reads version %u "
                      "(retrain, or use the mha that wrote it)", path, version, CHECKPOINT_VERSION);
        goto out;
    }
    ck->file_bytes = size;
    if (get_u64(buf + 16) != size) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: checkpoint says it is %llu bytes but the file has %llu "
                      "(truncated or appended to)", path, (unsigned long long)get_u64(buf + 16),
                      (unsigned long long)size);
        goto out;
    }
    if (crc32_update(0, buf, (size_t)size - 4) != get_u32(buf + size - 4)) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: checksum mismatch (the file is corrupt)", path);
        goto out;
    }
    uint64_t off = HEADER_BYTES, end = size - 4;
    uint64_t adam_bytes[2] = {0, 0};
    for (uint32_t s = 0; s < n_sections; s++) {
        if (end - off < SECTION_HEADER_BYTES) { rc = mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (section %u header past the end)", path, s); goto out; }
        uint32_t tag = get_u32(buf + off);
        uint64_t n = get_u64(buf + off + 8);
        off += SECTION_HEADER_BYTES;
        if (n > end - off) { rc = mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (section %u claims %llu bytes, %llu left)", path, s, (unsigned long long)n, (unsigned long long)(end - off)); goto out; }
        const unsigned char *p = buf + off;
        switch (tag) {
        case TAG_CONFIG:
        case TAG_STATE:
        case TAG_ORIGIN: {
            char **dst = tag == TAG_CONFIG ? &ck->config_json : tag == TAG_STATE ? &ck->state_json : &ck->origin_json;
            free(*dst);
            if (!(*dst = dup_text(p, n))) { rc = mha_fail(err, MHA_EXIT_DATA, "%s: out of memory reading the checkpoint", path); goto out; }
            break;
        }
        case TAG_VOCAB:
            if (ck->vocab) vocab_free(ck->vocab);
            ck->vocab = NULL;
            if (vocab_deserialize(&ck->vocab, p, (size_t)n, err) != 0) {
                char inner[1800];
                snprintf(inner, sizeof inner, "%.1700s", err ? err->msg : "");
                rc = mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint vocab (%s)", path, inner);
                goto out;
            }
            break;
        case TAG_LABELS:
            labelmap_free(&ck->labels);
            if ((rc = parse_labels(&ck->labels, p, n, path, err)) != 0) goto out;
            break;
        case TAG_PARAMS:
        case TAG_ADAM_M:
        case TAG_ADAM_V: {
            if (n % 4 != 0) { rc = mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (float section of %llu bytes)", path, (unsigned long long)n); goto out; }
            float **dst = tag == TAG_PARAMS ? &ck->params : tag == TAG_ADAM_M ? &ck->adam_m : &ck->adam_v;
            free(*dst);
            if (!(*dst = dup_floats(p, n))) { rc = mha_fail(err, MHA_EXIT_DATA, "%s: out of memory reading the checkpoint", path); goto out; }
            if (tag == TAG_PARAMS) ck->n_params = (size_t)(n / 4);
            else adam_bytes[tag == TAG_ADAM_V] = n;
            break;
        }
        default: break; /* sections from newer minor revisions are skipped */
        }
        off += n;
    }
    if (!ck->config_json || !ck->vocab || !ck->labels.n || !ck->params) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (missing config, vocab, labels or parameters)", path);
        goto out;
    }
    if (!ck->adam_m != !ck->adam_v || !ck->adam_m != !ck->state_json) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (training state incomplete: expected both "
                      "optimizer moments and the state, or none of them)", path);
        goto out;
    }
    if ((ck->adam_m && adam_bytes[0] != ck->n_params * 4) || (ck->adam_v && adam_bytes[1] != ck->n_params * 4)) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: corrupt checkpoint (optimizer state size differs from the parameters)", path);
        goto out;
    }
out:
    free(buf);
    if (rc) checkpoint_free(ck);
    return rc;
}

int checkpoint_config(const Checkpoint *ck, Config *cfg, const char *path, MhaError *err) {
    if (config_from_json(cfg, ck->config_json, "", err) == 0) return 0;
    char inner[1500], by[320] = "";
    snprintf(inner, sizeof inner, "%.1400s", err->msg);
    /* a key, section or value this mha does not know: most likely a setting of a newer mha,
     * whose name ORIGIN holds (files without it: only the message) */
    cJSON *origin = ck->origin_json ? cJSON_Parse(ck->origin_json) : NULL;
    const cJSON *writer = cJSON_GetObjectItemCaseSensitive(origin, "mha");
    if (cJSON_IsString(writer) && writer->valuestring &&
        (strstr(inner, "unknown key") || strstr(inner, "unknown section") || strstr(inner, "is not allowed")))
        snprintf(by, sizeof by, "; the file was written by mha %.100s: a setting this mha does not know is "
                 "likely one of a newer mha, so read it with that one", writer->valuestring);
    cJSON_Delete(origin);
    return mha_fail(err, MHA_EXIT_DATA, "%s: the stored config is not valid (%s)%s", path, inner, by);
}

int checkpoint_check_layout(const Checkpoint *ck, const Config *cfg, const char *path, MhaError *err) {
    ModelDims d;
    ParamLayout lay;
    model_dims_from_config(&d, cfg, vocab_size(ck->vocab), ck->labels.n);
    param_layout_build(&lay, &d, 0, 0);
    size_t total = lay.total;
    param_layout_free(&lay);
    if (total != ck->n_params)
        return mha_fail(err, MHA_EXIT_DATA, "%s: checkpoint holds %zu parameters but its config describes %zu "
                        "(corrupt or from another version)", path, ck->n_params, total);
    return 0;
}

void checkpoint_free(Checkpoint *ck) {
    free(ck->config_json);
    if (ck->vocab) vocab_free(ck->vocab);
    labelmap_free(&ck->labels);
    free(ck->params);
    free(ck->adam_m);
    free(ck->adam_v);
    free(ck->state_json);
    free(ck->origin_json);
    memset(ck, 0, sizeof *ck);
}
