// The global allocation function of loupe's executables (the `loupe` CLI and the trace benches):
// blocks of 4 MiB and more are advised onto transparent huge pages.
//
// Why: importing and analysing a large trace touches hundreds of MB of fresh column vectors,
// and on this VM a 4 KiB page fault costs ~3.8 us: `loupe trace analyze` of a 753 MB Kineto file
// took 136 k minor faults; with its large blocks advised onto 2 MiB pages, 28 k, and ~1 s less
// CPU (docs/performance.md). Kernels whose THP mode is
// `madvise` (Debian's default) give huge pages only to advised memory, and glibc advises only
// under GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which a user would have to set, so the
// executables advise their large blocks themselves.
//
// The same cost is why these executables set malloc, before main, to reuse the pages it has
// instead of asking the kernel for fresh ones: one arena for all threads (M_ARENA_MAX 1), so a
// block freed by one thread (a part reader's columns, dropped once its part is appended; a
// helper's scratch vectors) serves the next thread's allocation; blocks under 32 MiB from that
// arena rather than from mmap (M_MMAP_THRESHOLD), so a freed column stays in it; and the arena's
// top kept up to 1 GiB (M_TRIM_THRESHOLD). finish()'s and the analyses' vectors then land on
// pages the import already touched. `loupe trace analyze` of the 753 MB Kineto file, three
// interleaved runs each (2026-12-07 13:10-13:12 UTC, load ~2 from other sessions): glibc's
// defaults 34.2-35.7 k minor faults, system time 0.62-0.68 s; one arena 27.0-28.4 k, 0.40-0.52 s;
// all three settings 13.0-13.3 k, 0.25-0.39 s, user time 1.62-1.74 s against 1.72-1.97 s, wall
// 1.12-1.17 s against 1.45-1.48 s, peak resident 263-275 MB against 235-259 MB. Threads that
// allocate little and small lose nothing to sharing the arena (tcache serves those without its
// lock): eight 20 MB rank files imported on two threads took 1.21-1.24 s of CPU against main's
// 1.70-1.85 s (rank_ingest_tests; peak 270-273 MB, 1.7x the input; one file 41-42 MB, 2.1x).
//
// Only executables link this object (CMake: loupe_huge_pages): libloupe, which subjects link,
// keeps the C++ library's allocation function. Nothing else changes: memory still comes from
// malloc and goes back through the default operator delete (free). Under AddressSanitizer the
// sanitizer's own allocation functions stay in place.
#include <malloc.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#if !defined(__SANITIZE_ADDRESS__) && !defined(LOUPE_NO_HUGE_PAGES)
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOUPE_NO_HUGE_PAGES 1
#endif
#endif
#endif

#if !defined(__SANITIZE_ADDRESS__) && !defined(LOUPE_NO_HUGE_PAGES) && defined(MADV_HUGEPAGE)

namespace {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
// A block this large holds at least one whole aligned huge page wherever malloc puts it.
constexpr std::size_t kAdviseFromBytes = 2 * kHugePageBytes;

void advise_huge_pages(void* block, std::size_t size) {
  const auto begin = reinterpret_cast<std::uintptr_t>(block);
  const std::uintptr_t first = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const std::uintptr_t last = (begin + size) & ~(kHugePageBytes - 1);
  // Advice only: a kernel without THP refuses it and the block stays on small pages.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

// Blocks under this size come from the arena, not from mmap: the most glibc accepts (half its
// 64 MiB heap), so a freed column of up to 32 MiB stays in the arena for the next one. Fixing it
// also stops glibc moving its threshold up and down with each block freed.
constexpr int kMmapThresholdBytes = 32 << 20;
// Free memory at the arena's top is returned to the kernel only past this much: returned pages
// come back as fresh pages on the next allocation. A long-lived process (the MCP server) keeps
// up to this much of its peak after a large trace.
constexpr int kTrimThresholdBytes = 1 << 30;

// Before main, so before any thread of the executable has an arena of its own.
[[maybe_unused]] const bool kAllocatorSet = [] {
  const bool one_arena = ::mallopt(M_ARENA_MAX, 1) == 1;
  const bool threshold = ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) == 1;
  const bool trim = ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) == 1;
  return one_arena && threshold && trim;
}();

void* allocate(std::size_t size) {
  if (size == 0) size = 1;
  while (true) {
    void* block = std::malloc(size);
    if (block != nullptr) {
      if (size >= kAdviseFromBytes) advise_huge_pages(block, size);
      return block;
    }
    const std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

}  // namespace

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }

#endif
