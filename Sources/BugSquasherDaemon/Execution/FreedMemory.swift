/// Gives memory the allocator holds free back to the system, after work that peaked (an import
/// of large records, subscriptions with many registrations): glibc keeps freed memory in its
/// arenas, so the daemon's resident size would otherwise stay at the peak while it idles.
func returnFreedMemory() {
    #if os(Linux)
    _ = glibcMallocTrim(0)
    #endif
}

#if os(Linux)
/// glibc's `malloc_trim` (declared in `<malloc.h>`, which the Glibc module does not export).
@_silgen_name("malloc_trim")
private func glibcMallocTrim(_ pad: Int) -> Int32
#endif
