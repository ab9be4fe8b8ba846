/* model/run_dir.c: the output folder of a training run: lock, claim, stale temporary
 * checkpoint files, the folder of a last.mha (see run_dir.h). */
#include "model/run_dir.h"
#include "model/checkpoint.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* checkpoint_save writes DIR/.NAME.tmp.PID and renames it into place; a process killed
 * in between leaves that file behind. Called with the folder's lock held (so no other
 * mha-train writes here): removes such files whose PID is no longer running. */
static void remove_stale_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name, *t = strstr(n, ".mha.tmp.");
        if (n[0] != '.' || !t || t == n) continue;
        const char *digits = t + strlen(".mha.tmp.");
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (!isdigit((unsigned char)digits[0]) || *end || errno || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  /* still running (or not ours) */
        struct stat st;
        if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (unlinkat(dirfd(d), n, 0) == 0) removed++;
    }
    closedir(d);
    if (removed)
        fprintf(stderr, "mha-train: removed %d temporary checkpoint file%s left in %s by a killed run\n",
                removed, removed == 1 ? "" : "s", dir);
}

static dev_t locked_dev;   /* the folder run_dir_lock locked, as it was then */
static ino_t locked_ino;
static int have_locked;
static int locked_dir_fd = -1;   /* that folder, held open: checkpoints are saved through it */
static int created_dir;          /* run_dir_lock made it (it did not exist before) */
/* The folders above it that run_dir_lock made: the prefixes of the path (its trailing slashes
 * dropped) of these lengths, shallowest first (a path of more levels than this keeps the rest) */
#define MAX_MADE_PARENTS 64
static char made_path[4200];
static size_t made_parent_len[MAX_MADE_PARENTS];
static int n_made_parents;

/* Removes the folders above output.dir that run_dir_lock made, deepest first, while they are
 * empty (rmdir removes nothing else); stops at the first it cannot remove. */
static void remove_made_parents(void) {
    while (n_made_parents > 0) {
        made_path[made_parent_len[--n_made_parents]] = '\0';
        if (rmdir(made_path) != 0) {
            n_made_parents = 0;
            return;
        }
    }
}

int run_dir_fd(void) { return locked_dir_fd; }

int run_dir_check(const char *dir, MhaError *err) {
    struct stat st;
    if (!have_locked) return 0;
    int gone = stat(dir, &st) != 0;
    if (!gone && st.st_dev == locked_dev && st.st_ino == locked_ino) return 0;
    return mha_fail(err, MHA_EXIT_DATA, "%s: the output folder was moved or replaced while this run was "
                    "training (%s); nothing was saved there, so as not to overwrite what is there now. The "
                    "run's earlier checkpoints are in the folder it was moved to, if it was moved (continue "
                    "with --resume FOLDER/last.mha)", dir, gone ? "it is gone" : "another folder has its name now");
}

int run_dir_lock(const char *dir, MhaError *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s", dir);
    for (size_t n = strlen(path); n > 1 && path[n - 1] == '/';) path[--n] = '\0';   /* "out/" is "out" */
    snprintf(made_path, sizeof made_path, "%s", path);
    n_made_parents = 0;
    for (char *p = path + 1; *p; p++)
        if (*p == '/' && p[-1] != '/') {
            *p = 0;
            if (mkdir(path, 0755) == 0 && n_made_parents < MAX_MADE_PARENTS)
                made_parent_len[n_made_parents++] = (size_t)(p - path);
            *p = '/';
        }
    created_dir = mkdir(path, 0755) == 0;
    if (!created_dir && errno != EEXIST) {
        int e = errno;
        remove_made_parents();
        if (e == ENOTDIR)   /* output.dir = afile/sub: the same mistake as output.dir = afile */
            return mha_fail(err, MHA_EXIT_USAGE, "%s: output.dir goes through a file, not a folder (choose "
                            "another output.dir)", dir);
        return mha_fail(err, MHA_EXIT_DATA, "%s: cannot create output folder (%s)", dir, strerror(e));
    }
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))   /* path: without trailing slashes ("afile/") */
        return mha_fail(err, MHA_EXIT_USAGE, "%s: output.dir names a file, not a folder (choose another "
                        "output.dir)", dir);
    /* the folder this run holds, opened once: its lock file is made in it and the saves go
     * through it (run_dir_fd), so the lock and the checkpoints are in the same folder whatever
     * happens to the path (run_dir_check) */
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0 || fstat(dir_fd, &st) != 0) {
        int e = errno;
        if (dir_fd >= 0) close(dir_fd);
        return mha_fail(err, MHA_EXIT_DATA, "%s: cannot open the output folder (%s)", dir, strerror(e));
    }
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = openat(dir_fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        close(dir_fd);
        return mha_fail(err, MHA_EXIT_DATA, "%s: cannot create lock file (%s)", path, strerror(e));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        close(dir_fd);
        if (e == EWOULDBLOCK || e == EAGAIN)
            return mha_fail(err, MHA_EXIT_DATA, "%s: another mha-train is writing to this folder "
                            "(wait for it, or set output.dir to another folder)", dir);
        return mha_fail(err, MHA_EXIT_DATA, "%s: cannot lock %s (%s); mha-train locks its output folder so "
                        "that two runs never write to it at once: put output.dir on a file system that "
                        "supports flock (a local disk rather than some network file systems)", dir, path,
                        strerror(e));
    }
    locked_dev = st.st_dev;
    locked_ino = st.st_ino;
    locked_dir_fd = dir_fd;
    have_locked = 1;
    remove_stale_temp_files(dir);
    /* a folder the run cannot write in (read-only, or a .lock left by a run that could):
     * found now, not at the first save an epoch later. A file is made and removed, as the
     * saves will (access(2) says yes to root on a read-only mount, and knows no quotas) */
    char probe[64];
    checkpoint_temp_name(probe, sizeof probe, "write-test.mha");   /* a stray one is removed as stale */
    int pfd = openat(dir_fd, probe, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (pfd < 0) {   /* (O_TRUNC, not O_EXCL: one left by a killed run of this PID, as in a container) */
        const int e = errno;
        return mha_fail(err, MHA_EXIT_DATA, "%s: cannot write in the output folder (%s)%s", dir, strerror(e),
                        e == EACCES || e == EPERM ? "; make it writable (chmod u+w), or set output.dir to another folder"
                        : e == EROFS ? "; it is on a read-only file system: set output.dir to another folder" : "");
    }
    close(pfd);
    unlinkat(dir_fd, probe, 0);
    return 0;  /* fd stays open on purpose: the lock lives as long as the process */
}

void run_dir_remove_if_unused(const char *dir) {
    if (!created_dir || locked_dir_fd < 0) return;
    MhaError ignore;
    if (run_dir_check(dir, &ignore)) return;   /* moved or replaced: not ours to remove */
    int dup_fd = dup(locked_dir_fd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0) close(dup_fd);
        return;
    }
    rewinddir(d);
    int only_lock = 1;
    struct dirent *e;
    while (only_lock && (e = readdir(d)) != NULL)
        only_lock = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || strcmp(e->d_name, ".lock") == 0;
    closedir(d);
    if (!only_lock || unlinkat(locked_dir_fd, ".lock", 0) != 0 || rmdir(dir) != 0) return;
    remove_made_parents();
}

/* 0 when path is a regular file with something in it that does not begin as a metrics.jsonl
 * mha-train wrote ({"type":"); 1 otherwise: such a log, an empty file, or no regular file
 * (a link to /dev/null, which a user makes to keep no log, is written to as it is) */
static int metrics_log_replaceable(const char *path) {
    static const char head[] = "{\"type\":\"";
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return 1;
    char buf[sizeof head] = "";
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof head - 1, f);
    fclose(f);
    return n == sizeof head - 1 && memcmp(buf, head, n) == 0;
}

int run_dir_claim(const char *dir, int overwrite, MhaError *err) {
    char last[4300], model[4300], log[4300];
    snprintf(last, sizeof last, "%s/last.mha", dir);
    snprintf(model, sizeof model, "%s/model.mha", dir);
    snprintf(log, sizeof log, "%s/metrics.jsonl", dir);
    int has_last = access(last, F_OK) == 0, has_model = access(model, F_OK) == 0;
    if (overwrite) {
        if ((has_last && unlink(last) != 0) || (has_model && unlink(model) != 0))
            return mha_fail(err, MHA_EXIT_DATA, "%s: cannot remove the earlier run's checkpoints (%s)", dir,
                            strerror(errno));
        return 0;
    }
    if (has_last)
        return mha_fail(err, MHA_EXIT_USAGE, "%s already holds a run (last.mha); continue it with --resume "
                        "%s, choose another output.dir, or start over with --overwrite", dir, last);
    if (has_model)
        return mha_fail(err, MHA_EXIT_USAGE, "%s already holds a trained model (model.mha); choose another "
                        "output.dir, or start over with --overwrite", dir);
    /* the log of a run that saved no checkpoint (stopped in its first epoch) is replaced, as
     * that run is started again; a file of that name that is not such a log is the user's */
    if (!metrics_log_replaceable(log)) {
        if (access(log, R_OK) != 0)
            return mha_fail(err, MHA_EXIT_DATA, "%s: cannot read it to tell whether it is an earlier run's log (%s); "
                            "move it, choose another output.dir, or replace it with --overwrite", log, strerror(errno));
        return mha_fail(err, MHA_EXIT_USAGE, "%s: a file mha-train did not write is in the way of the run's log "
                        "(it would be replaced); move it, choose another output.dir, or replace it with "
                        "--overwrite", log);
    }
    return 0;
}

int run_dir_check_inputs(const char *dir, const char *const *keys, const char *const *inputs, int n,
                         MhaError *err) {
    static const char *const outputs[] = {"last.mha", "model.mha", "metrics.jsonl"};
    for (int o = 0; o < 3; o++) {
        char out[4300];
        struct stat so, si;
        snprintf(out, sizeof out, "%s/%s", dir, outputs[o]);
        if (stat(out, &so) != 0) continue;
        for (int i = 0; i < n; i++)
            if (inputs[i][0] && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev &&
                si.st_ino == so.st_ino)
                return mha_fail(err, MHA_EXIT_USAGE, "%s %s is where the run writes its %s (output.dir %s): "
                                "it would write over its own data; move the data file, or set output.dir to "
                                "another folder", keys[i], inputs[i], outputs[o], dir);
    }
    return 0;
}

int run_dir_of(const char *path, char *out, size_t n) {
    errno = 0;
    if (n < PATH_MAX || !realpath(path, out)) return 0;
    char *slash = strrchr(out, '/');
    if (slash == out) slash[1] = '\0';   /* a file in / */
    else *slash = '\0';
    return 1;
}
