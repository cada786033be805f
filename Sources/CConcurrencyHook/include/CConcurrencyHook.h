#ifndef CCONCURRENCYHOOK_H
#define CCONCURRENCYHOOK_H

#include <stdbool.h>

/// Routes every job the Swift runtime enqueues on its global executor to `enqueue` instead,
/// through the runtime's `swift_task_enqueueGlobal_hook`. Returns false when a hook is
/// installed already (the first one stays).
///
/// Written in C because the hook is a variable of the Swift runtime that a statically linked
/// binary does not export: `dlsym` cannot find it there, but the linker resolves a reference
/// to it.
bool bugsquasher_install_global_enqueue_hook(void (*enqueue)(void *job));

/// Names the calling thread (as `ps -L` and `/proc/PID/task/TID/comm` show it; 15 bytes at most).
void bugsquasher_name_current_thread(const char *name);

/// `pipe2(2)`: a pipe made with `flags` (`O_CLOEXEC`, `O_NONBLOCK`) set from the start, so that
/// no process another thread spawns in between inherits it. Swift's Glibc module does not
/// declare `pipe2`, a GNU extension. Returns 0, or -1 with `errno` set.
int bugsquasher_pipe2(int descriptors[2], int flags);

/// `sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE`: starts writing `count` bytes of `fd` from
/// `offset` back to the disk, without waiting, so that a later `fsync` has little left to wait
/// for. Swift's Glibc module does not declare it, a Linux extension. Returns 0, or -1 with
/// `errno` set.
int bugsquasher_start_writeback(int fd, long long offset, long long count);

#endif
