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
// The same cost is why these executables keep one malloc arena for all their threads
// (M_ARENA_MAX = 1, set before main): with an arena per thread, a block freed by one thread (a
// part reader's columns, dropped once its part is appended; a helper's scratch vectors) only
// serves that arena, and the next thread's allocation faults in fresh pages. With one arena the
// later vectors of finish() and the analyses reuse those pages: `loupe trace analyze` of the 753 MB
// Kineto file, three interleaved runs each (2026-12-07 13:12 UTC), took 34.2-35.7 k minor faults
// and 0.62-0.68 s of system time with an arena per thread, 27.0-28.4 k and 0.40-0.52 s with one
// (user time 1.74-1.97 s either way). Threads that allocate little and small lose nothing to
// sharing it (tcache serves those without the arena's lock): eight 20 MB rank files imported on
// two threads took 1.44-1.76 s of CPU against 1.70-1.85 s (rank_ingest_test).
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

// Before main, so before any thread of the executable has an arena of its own.
[[maybe_unused]] const bool kOneArena = ::mallopt(M_ARENA_MAX, 1) == 1;

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
