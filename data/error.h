/* data/error.h: the user-facing error type shared by every layer, and name suggestions.
 * Library code never exits for a user error: it fills an MhaError and returns a
 * non-zero exit code up to cmd/, which prints the message and exits with it. */
#ifndef MHA_DATA_ERROR_H
#define MHA_DATA_ERROR_H

enum { MHA_OK = 0, MHA_EXIT_DATA = 1, MHA_EXIT_USAGE = 2 };

typedef struct {
    int code;          /* MHA_EXIT_DATA (runtime/data) or MHA_EXIT_USAGE (config/arguments) */
    char msg[2048];    /* one line, compiler style: "FILE:LINE: what is wrong (what was expected)" */
} MhaError;

/* Fill err (may be NULL) with a printf-style message; returns code. */
int mha_fail(MhaError *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "Did you mean ...?" for a name the user typed: Levenshtein distance (strings cut to 63
 * bytes); whether a distance is close enough to suggest (1 + len/4, at most 3); and the
 * closest of names[0..n) when close enough, else NULL. */
int mha_edit_distance(const char *a, const char *b);
int mha_close_enough(int dist, const char *typed);
const char *mha_did_you_mean(const char *typed, const char *const *names, int n);
/* Index of name in names[0..n) (exact match), or -1: the programs' option tables. */
int mha_name_index(const char *name, const char *const *names, int n);

/* Standard input, output or error closed by the caller (`prog >&-`): opened on /dev/null so
 * that no file the program opens gets their number (a report meant for standard output would
 * land in it), the wrong way round so that using the stream still fails as on a closed one.
 * The programs call it first thing. */
void mha_guard_std_fds(void);

#endif
