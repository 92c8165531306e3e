// The process' resident memory, read from /proc (Linux), and a peak-resident meter that can be
// reset between measurements so one process can measure the peak memory of several runs in turn.
#ifndef ATTNLAB_CORE_PROCESS_MEMORY_H_
#define ATTNLAB_CORE_PROCESS_MEMORY_H_

#include <cstdint>

namespace attnlab {

// Resident bytes now (/proc/self/statm); 0 when unavailable.
int64_t ResidentBytes();

// The peak resident bytes since the process started or since the last successful
// ResetPeakResident() (VmHWM in /proc/self/status); 0 when unavailable.
int64_t PeakResidentBytes();

// The memory the kernel says new allocations can get without swapping (MemAvailable in
// /proc/meminfo); 0 when unavailable.
int64_t MemAvailableBytes();

// Gives the heap's free pages back to the kernel (glibc's malloc_trim: the free memory of every
// arena, not only the top). Long analyses call it between passes: their per-chunk buffers are
// freed and allocated again, and the arenas would otherwise keep the freed pages resident.
void ReleaseFreeHeap();

// Gives free heap pages back to the kernel (ReleaseFreeHeap) and resets the peak to the current
// resident size (writes "5" to /proc/self/clear_refs, Linux >= 4.0). Returns false when the
// kernel refused the reset (then PeakResidentBytes() keeps the old, higher peak).
bool ResetPeakResident();

}  // namespace attnlab

#endif  // ATTNLAB_CORE_PROCESS_MEMORY_H_
