#ifndef BUGSQUASHER_CISAL_SHIM_H
#define BUGSQUASHER_CISAL_SHIM_H
#include <isa-l/igzip_lib.h>
#endif
