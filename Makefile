# Thin entry points over the CMake presets; CI calls `make test` verbatim.
#   make demo   install what is missing, build, run the main job           (~3 min from clean)
#   make test   install, build, lint, then every test through ctest        (~10 min from clean on 2 cores)
#   make build  configure and build the default preset (release)
#   make bench  build, then run the benchmarks of loupe itself              (minutes; not part of test)
#   make lint   check formatting of tracked C++ files with clang-format
#   make test-asan  the test suite under AddressSanitizer + UBSan
PRESET ?= release
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)
BIN := build/bin

.PHONY: all deps configure build test test-asan demo bench lint format clean

all: build

deps:
	@scripts/install-deps

$(BUILD_DIR)/build.ninja: CMakeLists.txt CMakePresets.json | deps
	cmake --preset $(PRESET) >/dev/null

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

test: build lint
	ctest --preset $(PRESET) -j $(JOBS)

test-asan:
	$(MAKE) test PRESET=asan

demo: build
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
