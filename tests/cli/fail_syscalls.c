/* tests/cli/fail_syscalls.c: an LD_PRELOAD shim for test_fs_errors.sh that makes flock or
 * fsync fail with a chosen errno, as on file systems that lack them (flock: ENOLCK on some
 * NFS mounts; fsync: EINVAL on some FUSE and special file systems).
 *   MHA_FAKE_FLOCK_ERRNO=N   every flock() fails with errno N
 *   MHA_FAKE_FSYNC_ERRNO=N   every fsync() fails with errno N
 * Unset: the real call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>

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
