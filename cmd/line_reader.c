/* cmd/line_reader.c: mha-predict's buffered line reader (line_reader.h): lines of bounded
 * length from a file descriptor, and whether the next one is ready without blocking. */
#include "cmd/line_reader.h"
#include "data/utf8.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One read() into buf: 0 at the end of input or on an error (kept in r->error). */
static int fill(LineReader *r) {
    if (r->eof) return 0;
    ssize_t n;
    do n = read(r->fd, r->buf, sizeof r->buf); while (n < 0 && errno == EINTR);
    if (n < 0) r->error = errno;
    if (n <= 0) { r->eof = 1; return 0; }
    r->pos = 0;
    r->len = (size_t)n;
    return 1;
}

long line_reader_next(LineReader *r, size_t max_bytes, int *truncated) {
    size_t n = 0, limit = max_bytes + 1;   /* one byte more: the first byte after a cut */
    int any = 0;
    *truncated = 0;
    for (;;) {
        if (r->pos == r->len && !fill(r)) break;
        any = 1;
        char *start = r->buf + r->pos;
        char *nl = memchr(start, '\n', r->len - r->pos);
        size_t take = nl ? (size_t)(nl - start) : r->len - r->pos;
        size_t keep = n + take > limit ? limit - n : take;
        if (n + keep + 1 > r->cap) {
            char *grown = realloc(r->line, (n + keep + 1) * 2);
            if (!grown) {   /* reported as a read error: the input ends here */
                r->error = ENOMEM;
                r->eof = 1;
                return -1;
            }
            r->line = grown;
            r->cap = (n + keep + 1) * 2;
        }
        memcpy(r->line + n, start, keep);
        n += keep;
        r->pos += take + (nl ? 1 : 0);
        if (nl) break;
    }
    if (!any) return -1;
    if (!r->line) {
        if (!(r->line = malloc(1))) { r->error = ENOMEM; r->eof = 1; return -1; }
        r->cap = 1;
    }
    *truncated = n > max_bytes;
    if (*truncated) n = utf8_cut(r->line, max_bytes);   /* line[n] then starts a character */
    r->line[n] = 0;
    return (long)n;
}

int line_reader_ready(LineReader *r) {
    if (r->pos == r->len && !r->eof) {
        struct pollfd p = {r->fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0) return 0;
        fill(r);   /* readable: this read does not wait */
    }
    return r->eof || memchr(r->buf + r->pos, '\n', r->len - r->pos) != NULL;
}
