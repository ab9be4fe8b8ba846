/* data/vocab.c: the token counter used while reading the training set, the vocabulary
 * built from it, and the vocabulary's byte serialisation. Both are open-addressing hash
 * tables (linear probing, power-of-two size, load <= 1/2) over a byte arena. */
#include "data/vocab.h"
#include "data/little_endian.h"

#include <stdlib.h>
#include <string.h>

static const char *const RESERVED[VOCAB_RESERVED] = {"[PAD]", "[UNK]", "[CLS]"};

/* ---- a string table: arena + entries + hash slots -------------------------------------- */

typedef struct {
    char *arena;
    size_t arena_len, arena_cap;
    size_t *off;       /* (cap) token start in arena (NUL-terminated there) */
    int *len;          /* (cap) */
    uint64_t *hash;    /* (cap) */
    int n, cap;
    uint32_t *slots;   /* entry index + 1; 0 = empty */
    size_t nslots;     /* power of two */
} StrTab;

static uint64_t hash_bytes(const char *s, int len) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)(unsigned)len;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
        s += 8;
        len -= 8;
    }
    uint64_t w = 0;
    if (len > 0) memcpy(&w, s, (size_t)len);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

static void st_free(StrTab *t) {
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->hash);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static int st_find(const StrTab *t, const char *s, int len, uint64_t h) {
    if (!t->nslots) return -1;
    size_t mask = t->nslots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        uint32_t e = t->slots[i];
        if (!e) return -1;
        e--;
        if (t->hash[e] == h && t->len[e] == len && memcmp(t->arena + t->off[e], s, (size_t)len) == 0)
            return (int)e;
    }
}

static void st_place(StrTab *t, int e) {
    size_t mask = t->nslots - 1, i = (size_t)t->hash[e] & mask;
    while (t->slots[i]) i = (i + 1) & mask;
    t->slots[i] = (uint32_t)e + 1;
}

/* Room for `extra` more entries and `bytes` more arena bytes. */
static int st_reserve(StrTab *t, int extra, size_t bytes) {
    if (t->arena_len + bytes > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 4096;
        while (cap < t->arena_len + bytes) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    if (t->n + extra > t->cap) {
        int cap = t->cap ? t->cap : 256;
        while (cap < t->n + extra) {
            if (cap > (1 << 29)) return -1;
            cap *= 2;
        }
        size_t *o = realloc(t->off, (size_t)cap * sizeof *o);
        if (!o) return -1;
        t->off = o;
        int *l = realloc(t->len, (size_t)cap * sizeof *l);
        if (!l) return -1;
        t->len = l;
        uint64_t *h = realloc(t->hash, (size_t)cap * sizeof *h);
        if (!h) return -1;
        t->hash = h;
        t->cap = cap;
    }
    if ((size_t)(t->n + extra) * 2 > t->nslots) {
        size_t ns = t->nslots ? t->nslots : 512;
        while ((size_t)(t->n + extra) * 2 > ns) ns *= 2;
        uint32_t *s = calloc(ns, sizeof *s);
        if (!s) return -1;
        free(t->slots);
        t->slots = s;
        t->nslots = ns;
        for (int e = 0; e < t->n; e++) st_place(t, e);
    }
    return 0;
}

/* Append a token known to be absent; its index, or -1 when out of memory. */
static int st_add(StrTab *t, const char *s, int len, uint64_t h) {
    if (st_reserve(t, 1, (size_t)len + 1)) return -1;
    int e = t->n++;
    t->off[e] = t->arena_len;
    t->len[e] = len;
    t->hash[e] = h;
    if (len) memcpy(t->arena + t->arena_len, s, (size_t)len);
    t->arena[t->arena_len + (size_t)len] = '\0';
    t->arena_len += (size_t)len + 1;
    st_place(t, e);
    return e;
}

/* ---- counter ---------------------------------------------------------------------------- */

struct VocabCounter {
    StrTab t;
    long *count;   /* (count_cap >= t.n) */
    int count_cap;
    int oom;       /* an add failed for lack of memory; vocab_build then fails */
};

VocabCounter *vocab_counter_new(void) { return calloc(1, sizeof(VocabCounter)); }

void vocab_counter_free(VocabCounter *c) {
    if (!c) return;
    st_free(&c->t);
    free(c->count);
    free(c);
}

int32_t vocab_counter_intern(VocabCounter *c, const char *tok, int len) {
    if (len < 0) len = 0;
    uint64_t h = hash_bytes(tok, len);
    int e = st_find(&c->t, tok, len, h);
    if (e < 0) {
        if (c->count_cap <= c->t.n) {
            int cap = c->count_cap ? c->count_cap * 2 : 256;
            long *p = realloc(c->count, (size_t)cap * sizeof *p);
            if (!p) {
                c->oom = 1;
                return -1;
            }
            c->count = p;
            c->count_cap = cap;
        }
        e = st_add(&c->t, tok, len, h);
        if (e < 0) {
            c->oom = 1;
            return -1;
        }
        c->count[e] = 0;
    }
    c->count[e]++;
    return e;
}

void vocab_counter_add(VocabCounter *c, const char *tok, int len) {
    (void)vocab_counter_intern(c, tok, len);
}

int vocab_counter_size(const VocabCounter *c) { return c->t.n; }

const char *vocab_counter_token(const VocabCounter *c, int32_t idx, int *len, long *count) {
    if (idx < 0 || idx >= c->t.n) return NULL;
    if (len) *len = c->t.len[idx];
    if (count) *count = c->count[idx];
    return c->t.arena + c->t.off[idx];
}

/* ---- vocabulary ------------------------------------------------------------------------- */

struct Vocab {
    StrTab t;   /* entry index = id */
};

typedef struct {
    const char *s;
    int len;
    long count;
} Cand;

/* count descending, then bytes ascending (UTF-8 byte order = code point order), a prefix
 * before the longer token */
static int cand_cmp(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    int m = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->s, y->s, (size_t)m);
    if (r) return r;
    return (x->len > y->len) - (x->len < y->len);
}

static int is_reserved(const char *s, int len) {
    for (int i = 0; i < VOCAB_RESERVED; i++)
        if ((size_t)len == strlen(RESERVED[i]) && memcmp(s, RESERVED[i], (size_t)len) == 0) return 1;
    return 0;
}

static Vocab *vocab_with_reserved(int n_total, size_t bytes) {
    Vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    if (st_reserve(&v->t, n_total, bytes + 32)) {
        st_free(&v->t);
        free(v);
        return NULL;
    }
    for (int i = 0; i < VOCAB_RESERVED; i++) {
        int len = (int)strlen(RESERVED[i]);
        st_add(&v->t, RESERVED[i], len, hash_bytes(RESERVED[i], len));
    }
    return v;
}

Vocab *vocab_build(const VocabCounter *c, int min_count, int max_size) {
    if (!c || c->oom) return NULL;
    const StrTab *t = &c->t;
    Cand *cand = malloc(((size_t)t->n + 1) * sizeof *cand);
    if (!cand) return NULL;
    int m = 0;
    for (int e = 0; e < t->n; e++) {
        if (c->count[e] < (long)min_count || t->len[e] == 0) continue;
        const char *s = t->arena + t->off[e];
        if (is_reserved(s, t->len[e])) continue;
        cand[m++] = (Cand){s, t->len[e], c->count[e]};
    }
    qsort(cand, (size_t)m, sizeof *cand, cand_cmp);
    if (max_size > 0) {
        int room = max_size > VOCAB_RESERVED ? max_size - VOCAB_RESERVED : 0;
        if (m > room) m = room;
    }
    size_t bytes = 0;
    for (int i = 0; i < m; i++) bytes += (size_t)cand[i].len + 1;
    Vocab *v = vocab_with_reserved(VOCAB_RESERVED + m, bytes);
    if (v)
        for (int i = 0; i < m; i++) st_add(&v->t, cand[i].s, cand[i].len, hash_bytes(cand[i].s, cand[i].len));
    free(cand);
    return v;
}

int vocab_size(const Vocab *v) { return v->t.n; }

int32_t vocab_lookup(const Vocab *v, const char *tok, int len) {
    if (len < 0) return VOCAB_UNK;
    int e = st_find(&v->t, tok, len, hash_bytes(tok, len));
    return e < 0 ? VOCAB_UNK : e;
}

const char *vocab_token(const Vocab *v, int32_t id) {
    if (id < 0 || id >= v->t.n) return NULL;
    return v->t.arena + v->t.off[id];
}

void vocab_free(Vocab *v) {
    if (!v) return;
    st_free(&v->t);
    free(v);
}

/* ---- serialisation: u32 count, then per token u32 byte length + bytes (little-endian) -- */

int vocab_serialize(const Vocab *v, unsigned char **out, size_t *out_len) {
    size_t n = 4;
    for (int i = 0; i < v->t.n; i++) n += 4 + (size_t)v->t.len[i];
    unsigned char *b = malloc(n);
    if (!b) return MHA_EXIT_DATA;
    put_u32(b, (uint32_t)v->t.n);
    size_t w = 4;
    for (int i = 0; i < v->t.n; i++) {
        put_u32(b + w, (uint32_t)v->t.len[i]);
        memcpy(b + w + 4, v->t.arena + v->t.off[i], (size_t)v->t.len[i]);
        w += 4 + (size_t)v->t.len[i];
    }
    *out = b;
    *out_len = n;
    return MHA_OK;
}

int vocab_deserialize(Vocab **vp, const unsigned char *buf, size_t n, MhaError *err) {
    *vp = NULL;
    if (n < 4)
        return mha_fail(err, MHA_EXIT_DATA,
                        "vocabulary blob of %zu bytes is truncated (expected a 4-byte token count)", n);
    uint32_t count = get_u32(buf);
    if (count < VOCAB_RESERVED)
        return mha_fail(err, MHA_EXIT_DATA,
                        "vocabulary blob declares %u tokens (expected at least the %d reserved ones)",
                        (unsigned)count, VOCAB_RESERVED);
    if (count > (n - 4) / 4 || count > (1u << 29))
        return mha_fail(err, MHA_EXIT_DATA,
                        "vocabulary blob declares %u tokens but holds only %zu bytes (expected 4 "
                        "bytes or more per token; the blob is truncated or corrupt)",
                        (unsigned)count, n);
    /* first pass: check every length before allocating anything */
    size_t pos = 4, bytes = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (n - pos < 4)
            return mha_fail(err, MHA_EXIT_DATA,
                            "vocabulary blob truncated at byte %zu: token %u of %u has no length "
                            "(expected 4 more bytes)", pos, (unsigned)i, (unsigned)count);
        uint32_t len = get_u32(buf + pos);
        pos += 4;
        if (len == 0 || len > n - pos)
            return mha_fail(err, MHA_EXIT_DATA,
                            "vocabulary blob: token %u of %u at byte %zu declares %u bytes but %zu "
                            "remain (expected a length from 1 to the bytes left)",
                            (unsigned)i, (unsigned)count, pos - 4, (unsigned)len, n - pos);
        if (memchr(buf + pos, 0, len))
            return mha_fail(err, MHA_EXIT_DATA,
                            "vocabulary blob: token %u contains a NUL byte (expected UTF-8 text)",
                            (unsigned)i);
        if (i < VOCAB_RESERVED &&
            (len != strlen(RESERVED[i]) || memcmp(buf + pos, RESERVED[i], len) != 0))
            return mha_fail(err, MHA_EXIT_DATA,
                            "vocabulary blob: token %u is not %s (expected the reserved tokens "
                            "[PAD], [UNK], [CLS] first)", (unsigned)i, RESERVED[i]);
        pos += len;
        bytes += len + 1;
    }
    if (pos != n)
        return mha_fail(err, MHA_EXIT_DATA,
                        "vocabulary blob has %zu bytes after its %u tokens (expected none)",
                        n - pos, (unsigned)count);
    Vocab *v = vocab_with_reserved((int)count, bytes);
    if (!v) return mha_fail(err, MHA_EXIT_DATA, "out of memory reading the vocabulary");
    pos = 4;
    for (uint32_t i = 0; i < count; i++) {
        int len = (int)get_u32(buf + pos);
        const char *s = (const char *)buf + pos + 4;
        pos += 4 + (size_t)len;
        if (i < VOCAB_RESERVED) continue;
        uint64_t h = hash_bytes(s, len);
        if (st_find(&v->t, s, len, h) >= 0) {
            vocab_free(v);
            return mha_fail(err, MHA_EXIT_DATA,
                            "vocabulary blob: token %u '%.*s' occurs twice (expected distinct "
                            "tokens)", (unsigned)i, len < 100 ? len : 100, s);
        }
        st_add(&v->t, s, len, h);
    }
    *vp = v;
    return MHA_OK;
}
