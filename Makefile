# Thin entry points over the CMake presets; CI calls `make test` verbatim.
#   make demo   install what the demo needs (scripts/install-deps --demo), build only what it runs
#               (loupe, kda, diff_pair_example), run the main job: the kda objective in its
#               incident and fixed configurations (scripts/demo; ~3 min after the build)
#   make test   install everything, build everything, lint, then every test through ctest
#               (~10 min from clean on 2 cores)
#   make build  configure (tests and benchmarks on) and build the default preset (release)
#   make bench  build, then run the benchmarks of loupe itself              (minutes; not part of test)
#   make lint   check formatting of tracked C++ files with clang-format
#   make test-asan  the test suite under AddressSanitizer + UBSan (build/asan; see the README for its time)
#   make device-bundle  build kda, loupe and the GPU tools for the H200 into build/device (carry it)
#   make fuzz   build the libFuzzer targets (preset fuzz, clang) and run each for FUZZ_SECONDS (60)
PRESET ?= release
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)
BIN := build/bin

FUZZ_SECONDS ?= 60

.PHONY: all deps configure build test test-asan fuzz demo bench lint format clean device-bundle

all: build

deps:
	@scripts/install-deps

# The demo configures a fresh tree without the tests and benchmarks (their packages are not in
# its subset); every other target configures with them, also over a tree the demo configured.
# (-U: the Python package's default, on where pybind11 is found, is decided afresh.)
FULL_CONFIG := -DLOUPE_BUILD_TESTS=ON
ifneq ($(PRESET),asan)
FULL_CONFIG += -DLOUPE_BUILD_BENCH=ON -ULOUPE_BUILD_PYTHON
endif
DEMO_CONFIG := -DLOUPE_BUILD_TESTS=OFF -DLOUPE_BUILD_BENCH=OFF -DLOUPE_BUILD_PYTHON=OFF
DEMO_TARGETS := loupe kda diff_pair_example

configure: deps
	@if [ ! -f $(BUILD_DIR)/build.ninja ] || [ CMakePresets.json -nt $(BUILD_DIR)/build.ninja ] || \
	    grep -qx 'LOUPE_BUILD_TESTS:BOOL=OFF' $(BUILD_DIR)/CMakeCache.txt; then \
	  cmake --preset $(PRESET) $(FULL_CONFIG) >/dev/null; fi

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

test: build lint
	ctest --preset $(PRESET) -j $(JOBS)

# Every sanitizer report fails the test that caused it (the preset builds with
# -fno-sanitize-recover); leak checking stays on.
test-asan:
	UBSAN_OPTIONS=print_stacktrace=1 $(MAKE) test PRESET=asan

fuzz: deps
	@command -v clang++ >/dev/null || { echo "make fuzz: needs clang with libFuzzer" \
	  "(Debian: apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
	cmake --preset fuzz >/dev/null
	cmake --build --preset fuzz -j $(JOBS) --target loupe_fuzzers
	fuzz/run-fuzzers -b build/fuzz -s $(FUZZ_SECONDS)

device-bundle:
	@scripts/device-bundle --jobs $(JOBS)

demo:
	@scripts/install-deps --demo
	@[ -f $(BUILD_DIR)/build.ninja ] || cmake --preset $(PRESET) $(DEMO_CONFIG) >/dev/null
	cmake --build --preset $(PRESET) -j $(JOBS) --target $(DEMO_TARGETS)
	@scripts/demo

bench: build
	@scripts/bench

lint:
	@files=$$(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' 2>/dev/null); \
	if [ -z "$$files" ]; then echo "lint: no files"; exit 0; fi; \
	clang-format --dry-run --Werror $$files && echo "lint: $$(echo $$files | wc -w) files formatted"

format:
	@git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' | xargs clang-format -i

clean:
	rm -rf build
