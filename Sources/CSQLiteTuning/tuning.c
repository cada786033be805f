#include "CSQLiteTuning.h"

#include <sqlite3.h>

int bugsquasher_sqlite_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
