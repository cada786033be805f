#define _GNU_SOURCE
#include "CConcurrencyHook.h"

#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <unistd.h>

// The Swift runtime's hook (swift/Runtime/Concurrency.h): when set, swift_task_enqueueGlobal
// calls it with the job and the runtime's own implementation, in the Swift calling convention.
typedef void (*swift_enqueue_original)(void *job);
typedef __attribute__((swiftcall)) void (*swift_enqueue_hook)(void *job, swift_enqueue_original original);
extern swift_enqueue_hook swift_task_enqueueGlobal_hook;

static void (*target)(void *job);

static __attribute__((swiftcall)) void enqueue_on_target(void *job, swift_enqueue_original original) {
    (void)original;
    target(job);
}

bool bugsquasher_install_global_enqueue_hook(void (*enqueue)(void *job)) {
    swift_enqueue_hook expected = NULL;
    // Someone else's hook stays, and so does the target of one installed before.
    if (__atomic_load_n(&swift_task_enqueueGlobal_hook, __ATOMIC_SEQ_CST) != NULL) return false;
    target = enqueue;
    return __atomic_compare_exchange_n(&swift_task_enqueueGlobal_hook, &expected, enqueue_on_target, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

void bugsquasher_name_current_thread(const char *name) {
    pthread_setname_np(pthread_self(), name);
}

int bugsquasher_pipe2(int descriptors[2], int flags) {
    return pipe2(descriptors, flags);
}

int bugsquasher_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE);
}
