/* kernels/cpu/thread_exit.c: the cleanups that run when a thread exits (MhaThreadExit in
 * cpu_common.h), which free the CPU kernels' per-thread workspaces, and the count of bytes
 * that MhaBuffers hold.
 *
 * One pthread key for the whole process: a thread that arms a cleanup gives the key a value,
 * so that the key's destructor runs when the thread exits; the destructor runs the thread's
 * cleanups, which it finds in a _Thread_local list (still readable while destructors run). */
#include <pthread.h>
#include "kernels/cpu/cpu_common.h"

_Atomic size_t mha_buffer_bytes;

static pthread_key_t exit_key;
static int exit_key_made;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static _Thread_local MhaThreadExit *tl_armed;   /* the calling thread's, last armed first */

/* The key's destructor, in the exiting thread. The list is taken whole before its cleanups
 * run: one that arms anything (a workspace used again) starts a new list and sets the key
 * again, and POSIX then runs this destructor once more (up to PTHREAD_DESTRUCTOR_ITERATIONS
 * rounds), rather than looping here for ever. */
static void run_cleanups(void *unused) {
    (void)unused;
    MhaThreadExit *e = tl_armed;
    tl_armed = NULL;
    while (e) {
        MhaThreadExit *next = e->next;
        void (*fn)(void *) = e->fn;
        e->fn = NULL;   /* disarmed before it runs: using it afterwards arms it again */
        e->next = NULL;
        fn(e->arg);
        e = next;
    }
}

static void exit_key_create(void) { exit_key_made = pthread_key_create(&exit_key, run_cleanups) == 0; }

void mha_thread_exit_arm(MhaThreadExit *e, void (*fn)(void *), void *arg) {
    pthread_once(&exit_key_once, exit_key_create);
    /* armed even if the key could not be made (not seen in practice): the memory then stays
     * at exit, and a warm call still only tests fn */
    e->fn = fn;
    e->arg = arg;
    e->next = tl_armed;
    tl_armed = e;
    /* any non-NULL value; set at every arming, as the key's value is NULL again once its
     * destructor has run */
    if (exit_key_made) pthread_setspecific(exit_key, e);
}

void mha_thread_buffer_free(void *thread_buffer) {
    mha_buffer_free(&((MhaThreadBuffer *)thread_buffer)->buf);
}
