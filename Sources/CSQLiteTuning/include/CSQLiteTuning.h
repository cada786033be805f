#ifndef CSQLITETUNING_H
#define CSQLITETUNING_H

/// Turns off SQLite's memory statistics (`SQLITE_CONFIG_MEMSTATUS`), which take a global mutex
/// on every allocation SQLite makes; SQLite recommends this for performance (and Debian's build
/// leaves them on). Takes effect only before SQLite is first initialized (the first connection
/// opened); returns SQLite's result code (`SQLITE_MISUSE` when it was too late).
///
/// Written in C because `sqlite3_config` is variadic, which Swift cannot call.
int bugsquasher_sqlite_disable_memory_statistics(void);

#endif
