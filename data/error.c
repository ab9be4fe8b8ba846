/* data/error.c: filling an MhaError; suggesting the name a user meant; standard streams
 * closed by the caller. */
#include "data/error.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int mha_fail(MhaError *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int mha_edit_distance(const char *a, const char *b) {
    int row[64], n = (int)strlen(a), m = (int)strlen(b);
    if (n > 63) n = 63;
    if (m > 63) m = 63;
    for (int j = 0; j <= m; j++) row[j] = j;
    for (int i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= m; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

int mha_close_enough(int dist, const char *typed) {
    int limit = 1 + (int)strlen(typed) / 4;
    if (limit > 3) limit = 3;
    return dist <= limit;
}

int mha_name_index(const char *name, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

const char *mha_did_you_mean(const char *typed, const char *const *names, int n) {
    int best = -1, best_d = 1 << 30;
    for (int i = 0; i < n; i++) {
        int d = mha_edit_distance(typed, names[i]);
        if (d < best_d) best_d = d, best = i;
    }
    return best >= 0 && mha_close_enough(best_d, typed) ? names[best] : NULL;
}

void mha_guard_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* opened the wrong way round on purpose: a read of stdin or a write of stdout or
         * stderr still fails (EBADF), as it would on the closed stream */
        int n = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
}
