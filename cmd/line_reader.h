/* cmd/line_reader.h: mha-predict's buffered line reader over a file descriptor: bounds the
 * bytes kept per line (cut at a UTF-8 character boundary) and tells without blocking whether
 * the next whole line is ready, so that interactive pipes get answers line by line. */
#ifndef MHA_CMD_LINE_READER_H
#define MHA_CMD_LINE_READER_H

#include <stddef.h>

/* Zero it and set fd; free `line` (and close fd) when done. */
typedef struct {
    int fd;
    char buf[1 << 16];
    size_t pos, len;
    int eof;
    int error;   /* errno of a failed read (then eof is set too) */
    char *line;  size_t cap;
} LineReader;

/* Next line without its newline, in r->line, keeping at most max_bytes (the rest is
 * skipped), cut at a UTF-8 character boundary as mha-train's reader cuts its text: a cut
 * inside a character would leave a partial sequence that the tokenizer then reports as
 * invalid UTF-8. Returns its length, or -1 at end of input (also after a read error or when
 * out of memory: r->error says which); *truncated: it was cut. */
long line_reader_next(LineReader *r, size_t max_bytes, int *truncated);

/* Whether the next whole line (or the end) can be read without waiting: a line begun in the
 * buffer whose end has not come yet is not ready (the lines before it are answered first). */
int line_reader_ready(LineReader *r);

#endif
