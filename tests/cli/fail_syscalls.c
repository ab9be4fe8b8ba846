/* tests/cli/fail_syscalls.c: an LD_PRELOAD shim for test_fs_errors.sh that makes flock or
 * fsync fail with a chosen errno, as on file systems that lack them (flock: ENOLCK on some
 * NFS mounts; fsync: EINVAL on some FUSE and special file systems), and that moves the
 * output folder at the worst moment of a save.
 *   MHA_FAKE_FLOCK_ERRNO=N   every flock() fails with errno N
 *   MHA_FAKE_FSYNC_ERRNO=N   every fsync() fails with errno N
 *   MHA_FAKE_MOVE_DIR=D      right after the trainer's check of folder D before its first
 *                            save, D is renamed to D-moved and a new, empty D is made: a
 *                            user moving the folder in the instant before the save
 * Unset: the real call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fake_errno(const char *name) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : 0;
}

int flock(int fd, int op);
int flock(int fd, int op) {
    int e = fake_errno("MHA_FAKE_FLOCK_ERRNO");
    if (e) { errno = e; return -1; }
    int (*real)(int, int) = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    return real ? real(fd, op) : (errno = ENOSYS, -1);
}

int fsync(int fd);
int fsync(int fd) {
    int e = fake_errno("MHA_FAKE_FSYNC_ERRNO");
    if (e) { errno = e; return -1; }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real ? real(fd) : (errno = ENOSYS, -1);
}

/* MHA_FAKE_MOVE_DIR: the second stat() of that folder is run_dir_check's before the first
 * save (the first is run_dir_lock's); the move comes right after it answers "same folder" */
int stat(const char *path, struct stat *st);
int stat(const char *path, struct stat *st) {
    int (*real)(const char *, struct stat *) = (int (*)(const char *, struct stat *))dlsym(RTLD_NEXT, "stat");
    int rc = real ? real(path, st) : (errno = ENOSYS, -1);
    static int calls;
    const char *dir = getenv("MHA_FAKE_MOVE_DIR");
    if (dir && *dir && strcmp(path, dir) == 0 && ++calls == 2) {
        char aside[4200];
        snprintf(aside, sizeof aside, "%s-moved", dir);
        int e = errno;
        if (rename(dir, aside) == 0) mkdir(dir, 0755);
        errno = e;
    }
    return rc;
}
