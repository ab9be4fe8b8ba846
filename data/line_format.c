/* data/line_format.c: one line of TSV / fastText / JSON Lines / plain text -> (label, text);
 * format detection; the TSV header and extra-label checks. Shared by the dataset reader
 * (data/dataset.c) and mha-predict's streamed input (line_format.h). */
#include "data/line_format.h"
#include "data/json_syntax.h"
#include "data/utf8.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int format_from_name(const char *name) {
    static const char *const names[] = {"auto", "tsv", "fasttext", "jsonl", "plain"};
    for (int i = 0; i < 5; i++)
        if (name && strcmp(name, names[i]) == 0) return i;   /* same order as FORMAT_* */
    return -1;
}

static const char *skip_bom_spaces(const char *s) {
    s += utf8_bom_length(s, strnlen(s, 3));   /* a string shorter than the BOM is not read past its NUL */
    while (*s == ' ') s++;
    return s;
}

int detect_format(const char *first_line) {
    const char *s = skip_bom_spaces(first_line);
    if (strncmp(s, "__label__", 9) == 0) return FORMAT_FASTTEXT;
    if (*s == '{') return FORMAT_JSONL;
    if (strchr(s, '\t')) return FORMAT_TSV;
    return FORMAT_PLAIN;
}

static int hint_cli;   /* format_hint_set_cli */

void format_hint_set_cli(int cli) { hint_cli = cli != 0; }

const char *format_hint(const char *line, int expected, char *buf, size_t cap) {
    const char *s = skip_bom_spaces(line);
    int like = strncmp(s, "__label__", 9) == 0 ? FORMAT_FASTTEXT : *s == '{' ? FORMAT_JSONL
               : strchr(s, '\t') ? FORMAT_TSV : -1;
    buf[0] = '\0';
    if (like < 0 && strchr(s, ',')) {   /* a comma and no tab: CSV, which mha does not read */
        snprintf(buf, cap, "; the line looks like CSV (comma-separated), and mha reads TSV: convert "
                 "simple CSV with sed 's/,/\\t/' FILE > NEW (the first comma of each line becomes a tab; "
                 "for quoted fields use Python's csv module)");
        return buf;
    }
    if (like < 0 || like == expected) return buf;
    static const char *const names[] = {"", "tsv", "fasttext", "jsonl"};
    static const char *const looks[] = {"", "TSV", "fastText", "JSON Lines"};
    if (hint_cli)
        snprintf(buf, cap, "; the line looks like %s: give --input-format %s (or auto)", looks[like], names[like]);
    else
        snprintf(buf, cap, "; the line looks like %s: set data.format to \"%s\" (or \"auto\")", looks[like],
                 names[like]);
    return buf;
}

int columns_look_swapped(long n, long text_is_class, long label_is_class) {
    return n > 0 && text_is_class > 0 && 10 * text_is_class >= 9 * n && 10 * label_is_class <= n;
}

static const char *json_kind(const cJSON *j) {
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "invalid";
}

/* label NULL: the label is not read (nor checked). */
static int parse_json(char *line, char **label, char **text, MhaError *err) {
    size_t room = strlen(line) + 1;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(line, &end, 1);
    if (!j) {
        size_t n = room - 1, at = end && end >= line && end <= line + n ? (size_t)(end - line) : 0;
        const char *expected = "JSON that cJSON can parse";
        json_syntax_check(line, n, &at, &expected);   /* keeps cJSON's answer if it passes */
        char near[32];
        json_excerpt(near, line, n, at);
        char hint[320];
        return mha_fail(err, MHA_EXIT_DATA,
                        "bad JSON at byte offset %zu%s%s%s (expected %s); each line holds one JSON "
                        "object " JSONL_SHAPE "%s", at, *near ? " near '" : "", near, *near ? "'" : "", expected,
                        format_hint(line, FORMAT_JSONL, hint, sizeof hint));
    }
    int rc = 0;
    char num[32];
    const char *ls = NULL, *ts = NULL;
    if (!cJSON_IsObject(j)) {
        rc = mha_fail(err, MHA_EXIT_DATA, "the line is %s (expected a JSON object " JSONL_SHAPE ")",
                      json_kind(j));
        goto done;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
    if (!t) {
        rc = mha_fail(err, MHA_EXIT_DATA, "missing field \"text\" (expected " JSONL_SHAPE ")");
        goto done;
    }
    if (!cJSON_IsString(t) || !t->valuestring) {
        rc = mha_fail(err, MHA_EXIT_DATA, "field \"text\" is %s (expected a string)", json_kind(t));
        goto done;
    }
    if (json_nul_escape_at(line, room - 1) >= 0) {   /* as a NUL byte: never part of a text */
        rc = mha_fail(err, MHA_EXIT_DATA, "a string holds \\u0000, a NUL character (expected text "
                      "without NUL characters: remove it)");
        goto done;
    }
    ts = t->valuestring;
    const cJSON *l = label ? cJSON_GetObjectItemCaseSensitive(j, "label") : NULL;
    if (l) {
        if (cJSON_IsString(l) && l->valuestring) {
            ls = l->valuestring;
        } else if (cJSON_IsNumber(l) && fabs(l->valuedouble) < 9007199254740992.0 &&
                   l->valuedouble == floor(l->valuedouble)) {
            snprintf(num, sizeof num, "%lld", (long long)l->valuedouble);
            ls = num;
        } else {
            rc = mha_fail(err, MHA_EXIT_DATA,
                          "field \"label\" is %s%s (expected a string or an integer)", json_kind(l),
                          cJSON_IsNumber(l) ? " that is not an integer" : "");
            goto done;
        }
        if (utf8_is_blank(ls)) {   /* surrounding blanks are dropped below, as in TSV labels */
            rc = mha_fail(err, MHA_EXIT_DATA, "empty label (expected a non-empty \"label\")");
            goto done;
        }
    }
    {
        /* decoded strings are never longer than their JSON form, so they fit in `line` */
        size_t tl = strlen(ts), ll = 0;
        if (ls) {
            ll = strlen(ls) + 1;   /* room for the NUL */
        }
        if (tl + 1 + ll > room) {
            rc = mha_fail(err, MHA_EXIT_DATA, "JSON fields longer than the line (expected " JSONL_SHAPE ")");
            goto done;
        }
        memcpy(line, ts, tl + 1);
        *text = line;
        if (ls) {
            memcpy(line + tl + 1, ls, ll - 1);
            line[tl + ll] = '\0';
            *label = utf8_trim_blank(line + tl + 1);
        }
    }
done:
    cJSON_Delete(j);
    return rc;
}

/* parse_line and parse_text: label NULL reads the text alone, whatever the label is. */
static int parse_fields(char *line, int format, char **label, char **text, MhaError *err) {
    if (label) *label = NULL;
    *text = line;
    if (format == FORMAT_AUTO) format = detect_format(line);
    switch (format) {
    case FORMAT_PLAIN:
        return 0;
    case FORMAT_TSV: {
        char *tab = strchr(line, '\t');
        char hint[320];
        if (!tab)
            return mha_fail(err, MHA_EXIT_DATA, "no tab between label and text (expected 'label<TAB>text')%s",
                            format_hint(line, FORMAT_TSV, hint, sizeof hint));
        *tab = '\0';
        *text = tab + 1;
        if (!label) return 0;
        char *l = utf8_trim_blank(line);   /* Unicode spaces, zero-width characters and BOMs too */
        if (!*l)
            return mha_fail(err, MHA_EXIT_DATA,
                            "empty label (expected 'label<TAB>text' with a non-empty label)");
        *label = l;
        return 0;
    }
    case FORMAT_FASTTEXT: {
        char *p = line;
        while (*p == ' ') p++;
        char hint[320];
        if (strncmp(p, "__label__", 9) != 0)
            return mha_fail(err, MHA_EXIT_DATA, "missing __label__ prefix (expected '__label__LABEL text')%s",
                            format_hint(line, FORMAT_FASTTEXT, hint, sizeof hint));
        p += 9;
        char *l = p;
        while (*p && !is_line_space(*p)) p++;
        if (p == l && label)
            return mha_fail(err, MHA_EXIT_DATA,
                            "empty label after __label__ (expected '__label__LABEL text')");
        if (*p) *p++ = '\0';
        if (label) {   /* Unicode blanks around it too, as in TSV and JSON labels */
            l = utf8_trim_blank(l);
            if (!*l)
                return mha_fail(err, MHA_EXIT_DATA,
                                "empty label after __label__ (expected '__label__LABEL text')");
        }
        for (;;) {   /* further labels: the first one counts */
            while (is_line_space(*p)) p++;
            if (strncmp(p, "__label__", 9) != 0) break;
            while (*p && !is_line_space(*p)) p++;
        }
        if (label) *label = l;
        *text = p;
        return 0;
    }
    case FORMAT_JSONL:
        return parse_json(line, label, text, err);
    default:
        return mha_fail(err, MHA_EXIT_DATA,
                        "unknown format %d (expected auto, tsv, fasttext, jsonl or plain)", format);
    }
}

int parse_line(char *line, int format, char **label, char **text, MhaError *err) {
    return parse_fields(line, format, label, text, err);
}

int parse_text(char *line, int format, char **text, MhaError *err) {
    return parse_fields(line, format, NULL, text, err);
}

static char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

/* s is one of list (NULL-terminated), ignoring the case of ASCII letters */
static int in_list(const char *s, const char *const *list) {
    for (; *list; list++) {
        size_t i = 0;
        while (s[i] && (*list)[i] && ascii_lower(s[i]) == ascii_lower((*list)[i])) i++;
        if (!s[i] && !(*list)[i]) return 1;
    }
    return 0;
}

/* A TSV line of column names, such as "label<TAB>text" or "类别<TAB>评论". Both columns must
 * be names, so a real class called "label" still trains. */
int is_tsv_header(const char *label, const char *text) {
    static const char *const label_names[] = {"label", "labels", "class", "category", "cat", "target", "y",
                                              "tag", "sentiment", "polarity", "topic", "intent", "标签", "类别",
                                              "分类", "类型", "情感", "主题", NULL};
    static const char *const text_names[] = {"text", "texts", "text_a", "sentence", "sentence1", "review",
                                             "content", "comment", "doc", "document", "title", "query", "x",
                                             "文本", "内容", "评论", "句子", "标题", "评论内容", "正文", NULL};
    while (*text == ' ') text++;
    char t[32];
    size_t n = strlen(text);
    while (n > 0 && is_line_space(text[n - 1])) n--;
    if (n >= sizeof t) return 0;
    memcpy(t, text, n);
    t[n] = '\0';
    return in_list(label, label_names) && in_list(t, text_names);
}

/* fastText: a second __label__ after the first one (parse_line skips it) */
int fasttext_has_extra_label(const char *s) {
    while (*s == ' ') s++;
    if (strncmp(s, "__label__", 9) != 0) return 0;
    while (*s && !is_line_space(*s)) s++;
    while (is_line_space(*s)) s++;
    return strncmp(s, "__label__", 9) == 0;
}
