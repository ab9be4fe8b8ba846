/* tests/data/test_json_syntax.c: data/json_syntax.c directly: where the first syntax error
 * is and what was expected there (with json_excerpt's "near" text), and json_member_line's
 * line of a section or key, which only depth-1 and depth-2 object keys answer (keys inside
 * arrays or deeper objects do not count as members). */
#include "data/json_syntax.h"
#include "tests/test_util.h"

static void expect_error(const char *text, size_t want_at, const char *want_expected, const char *want_near) {
    size_t at = 12345;
    const char *expected = NULL;
    int rc = json_syntax_check(text, strlen(text), &at, &expected);
    char near[32];
    json_excerpt(near, text, strlen(text), at);
    CHECK(rc == -1 && at == want_at && expected && strcmp(expected, want_expected) == 0 &&
              strcmp(near, want_near) == 0,
          "'%s': rc %d at %zu expected '%s' near '%s' (wanted %zu '%s' '%s')", text, rc, at,
          expected ? expected : "(null)", near, want_at, want_expected, want_near);
}

static void test_syntax(void) {
    const char *good[] = {"{}", " [1, -2.5e3, \"a\\u00e9\\n\", true, false, null] ", "{\"a\": {\"b\": [{}]}}", "0",
                          "[\"\\ud83d\\ude00 \\uD83D\\uDE00\"]"};   /* a surrogate pair (an emoji) */
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        size_t at = 7;
        const char *e = "unchanged";
        CHECK(json_syntax_check(good[i], strlen(good[i]), &at, &e) == 0 && at == 7 &&
                  strcmp(e, "unchanged") == 0,
              "'%s' refused, or *at / *expected touched", good[i]);
    }
    expect_error("{\"a\": 1,}", 8, "another \"key\" after ','; JSON has no trailing commas", "}");
    expect_error("[1, 2,]", 6, "another value after ','; JSON has no trailing commas", "]");
    expect_error("{\"a\" 1}", 5, "':' after the key", "1}");
    expect_error("{\"a\": 1 \"b\": 2}", 8, "',' or '}'", "\"b\": 2}");
    expect_error("{'a': 1}", 1, "a \"key\" in double quotes", "'a': 1}");
    expect_error("{\"a\": 'x'}", 6, "a string in double quotes, not single quotes", "'x'}");
    expect_error("{\"a\": \"x\ny\"}", 6, "a closing '\"' on the same line", "\"x");
    expect_error("{\"a\": 01}", 7, "',' or '}'", "1}");
    expect_error("{\"a\": 1.}", 6, "digits after the decimal point", "1.}");
    expect_error("{\"a\": \"\\q\"}", 7, "an escape: \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX", "\\q\"}");
    /* UTF-16 surrogates: a pair is one character; one alone is an error (no UTF-8 for it) */
    expect_error("[\"a\\ud800b\"]", 3, "a high surrogate \\uD800-\\uDBFF followed by a low one \\uDC00-\\uDFFF",
                 "\\ud800b\"]");
    expect_error("[\"\\uD83D\\u0041\"]", 2, "a high surrogate \\uD800-\\uDBFF followed by a low one \\uDC00-\\uDFFF",
                 "\\uD83D\\u0041\"]");
    expect_error("[\"\\udc00\"]", 2, "no lone low surrogate: \\uDC00-\\uDFFF only after \\uD800-\\uDBFF",
                 "\\udc00\"]");
    expect_error("[\"\\ud800\"]", 2, "a high surrogate \\uD800-\\uDBFF followed by a low one \\uDC00-\\uDFFF",
                 "\\ud800\"]");
    expect_error("{} x", 3, "nothing after the top-level value", "x");
    expect_error("{\"a\": [1, 2", 11, "',' or ']'", "");
    /* the excerpt stops at 24 bytes without cutting a UTF-8 character, and at the line's end */
    expect_error("{\"a\": x中文中文中文中文中文中文中文}", 6,
                 "a value: a number, \"string\", true, false, null, {...} or [...]", "x中文中文中文中");
    /* nesting deeper than 512 is refused, not a stack overflow */
    char deep[1200];
    memset(deep, '[', 600);
    deep[600] = 0;
    size_t at;
    const char *e;
    CHECK(json_syntax_check(deep, 600, &at, &e) == -1 && strcmp(e, "less deeply nested data") == 0 && at == 512,
          "600 '[': %zu %s", at, e);
}

static void test_member_line(void) {
    const char *doc = "{\n"
                      " \"data\": {\"train\": \"t\",\n"          /* 2: data, train */
                      "   \"list\": [1, {\"inner\": 2}],\n"      /* 3: list; inner is not a member */
                      "   \"obj\": {\"deep\": 1},\n"             /* 4: obj; deep is not a member */
                      "   \"last\": 0},\n"                       /* 5: last */
                      " \"model\":\n"                            /* 6: model */
                      "  {\"d_model\": 64,\n"                    /* 7: d_model */
                      "   \"d_model\": 65}\n"                    /* 8: the duplicate */
                      "}\n";
    size_t n = strlen(doc);
    struct { int top, sub, line; } cases[] = {
        {0, -1, 2}, {0, 0, 2}, {0, 1, 3}, {0, 2, 4}, {0, 3, 5}, {0, 4, 0},
        {1, -1, 6}, {1, 0, 7}, {1, 1, 8}, {2, -1, 0}, {2, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = json_member_line(doc, n, cases[i].top, cases[i].sub);
        CHECK(got == cases[i].line, "member (%d, %d): line %d, expected %d", cases[i].top, cases[i].sub,
              got, cases[i].line);
    }
    /* a top-level array has no members; a syntax error after the key does not matter */
    CHECK(json_member_line("[{\"a\": 1}]", 10, 0, 0) == 0, "keys of an object in a top-level array");
    CHECK(json_member_line("{\"a\":\n{\"b\": 1,,}", 16, 0, 0) == 2, "key before a syntax error");
}

int main(void) {
    test_syntax();
    test_member_line();
    return test_finish("test_json_syntax");
}
