# md.h build. `make help` lists the targets.
#   make demo       build and run every chapter's ladder on its embedded default system
#   make test       everything that can run without a GPU (GPU tests print SKIP)
#   make test-gpu   the GPU tests; fails when there is no usable GPU
#   make gpu-check  on a GPU machine: GPU tests, compute-sanitizer, ceilings, benchmarks -> $OUT
#   make bench      benchmarks (JSON lines in build/bench/)
#   make ceilings   measure this GPU's ceilings -> build/bench/ceilings.json
#   make docs       Doxygen, warnings are errors
#   make install PREFIX=/usr/local
CC      ?= gcc
NVCC    ?= nvcc
PREFIX  ?= /usr/local
BUILD   := build
CWARN   := -Wall -Wextra -Werror -pedantic
CFLAGS  ?= -O2 -march=native
CFLAGS  += -std=c11 $(CWARN) -fopenmp -I.
LDLIBS  := -lm
MD_ARCH ?= sm_90
NVFLAGS ?= -O3 -std=c++17 -arch=$(MD_ARCH) -lineinfo -I. -Xcompiler -Wall,-Wextra,-fopenmp,-march=native
NVLIBS  := -lcufft -lgomp
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)

C_TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
GPU_TESTS := $(patsubst tests/%.cu,$(BUILD)/tests/%,$(wildcard tests/gpu_*.cu))
C_CHAPTERS  := $(patsubst chapters/%/main.c,$(BUILD)/chapters/%,$(wildcard chapters/*/main.c))
GPU_CHAPTERS:= $(patsubst chapters/%/main.cu,$(BUILD)/chapters/%,$(wildcard chapters/*/main.cu))
C_EXAMPLES  := $(patsubst examples/%/main.c,$(BUILD)/examples/%,$(wildcard examples/*/main.c))
GPU_EXAMPLES:= $(patsubst examples/%/main.cu,$(BUILD)/examples/%,$(wildcard examples/*/main.cu))
C_TOOLS     := $(patsubst reference/%.c,$(BUILD)/reference/%,$(wildcard reference/*.c))
BENCHES     := $(patsubst bench/%.cu,$(BUILD)/bench/%,$(wildcard bench/*.cu))
FUZZERS     := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
HEADERS := md.h md_cuda.cu.h tests/md_test.h

CPU_BINS := $(C_TESTS) $(C_CHAPTERS) $(C_EXAMPLES) $(C_TOOLS)
GPU_BINS := $(GPU_TESTS) $(GPU_CHAPTERS) $(GPU_EXAMPLES) $(BENCHES)
ifeq ($(HAVE_NVCC),1)
ALL_BINS := $(CPU_BINS) $(GPU_BINS)
else
ALL_BINS := $(CPU_BINS)
endif

SHELL := /bin/bash
.SECONDEXPANSION:
.PHONY: all demo test test-gpu gpu-check bench ceilings docs install uninstall clean help fuzz gpu
all: $(ALL_BINS)
gpu: $(GPU_BINS)

$(BUILD):
	@mkdir -p $(BUILD)
# every output folder exists before any rule runs (run.sh makes build/ first, so an
# order-only prerequisite on build/ alone would not create them)
$(shell mkdir -p $(BUILD)/tests $(BUILD)/chapters $(BUILD)/examples $(BUILD)/reference $(BUILD)/bench $(BUILD)/fuzz)

$(BUILD)/tests/%: tests/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/tests/%: tests/%.cu $(HEADERS) | $(BUILD)
	$(NVCC) $(NVFLAGS) $< -o $@ $(NVLIBS)
# md_cuda.cu.h's implementation in a file without md.h's: md.h's implementation compiled as C11
# on its own (tests/split_tu_md.c) and linked in. An explicit rule, so the pattern rule above
# (one .cu file per test) does not apply.
$(BUILD)/tests/gpu_split_tu: tests/gpu_split_tu.cu tests/split_tu_md.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -c tests/split_tu_md.c -o $(BUILD)/tests/split_tu_md.o
	$(NVCC) $(NVFLAGS) tests/gpu_split_tu.cu $(BUILD)/tests/split_tu_md.o -o $@ $(NVLIBS) -lm
$(BUILD)/chapters/%: chapters/%/main.c $(HEADERS) $(wildcard chapters/*.h) $$(wildcard chapters/%/*.h) $$(wildcard chapters/%/*.c) | $(BUILD)
	$(CC) $(CFLAGS) -Ichapters -Ichapters/$* $< -o $@ $(LDLIBS)
$(BUILD)/chapters/%: chapters/%/main.cu $(HEADERS) $(wildcard chapters/*.h) $$(wildcard chapters/%/*.h) $$(wildcard chapters/%/*.cu) | $(BUILD)
	$(NVCC) $(NVFLAGS) -Ichapters -Ichapters/$* $< -o $@ $(NVLIBS)
$(BUILD)/examples/%: examples/%/main.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/examples/%: examples/%/main.cu $(HEADERS) | $(BUILD)
	$(NVCC) $(NVFLAGS) $< -o $@ $(NVLIBS)
$(BUILD)/reference/%: reference/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/bench/%: bench/%.cu $(HEADERS) $(wildcard bench/*.h) | $(BUILD)
	$(NVCC) $(NVFLAGS) $< -o $@ $(NVLIBS)
$(BUILD)/fuzz/%: tests/fuzz/%.c md.h | $(BUILD)
	clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I. $< -o $@ -lm
fuzz: $(FUZZERS)

# The chapter ladders in order. A GPU chapter prints SKIP with the reason when there is no device.
demo: $(ALL_BINS)
	@for c in $(sort $(C_CHAPTERS) $(if $(HAVE_NVCC),$(GPU_CHAPTERS))); do \
	  echo; echo "=== $$(basename $$c) ==="; $$c || exit 1; done
	@if [ -z "$(HAVE_NVCC)" ]; then echo; echo "SKIP GPU chapters: nvcc not found, so they were not built"; fi

test:
	@bash tests/run.sh

test-gpu: gpu
	@MD_REQUIRE_GPU=1 bash tests/run.sh --gpu-only

gpu-check:
	@bash tests/gpu_check.sh

ceilings: $(BUILD)/bench/ceilings
	$(BUILD)/bench/ceilings | tee $(BUILD)/bench/ceilings.json

bench: gpu
	@bash tests/gpu_check.sh --bench-only

docs:
	@mkdir -p $(BUILD)
	@doxygen Doxyfile > $(BUILD)/doxygen.log 2> $(BUILD)/doxygen.warnings; \
	  if [ -s $(BUILD)/doxygen.warnings ]; then cat $(BUILD)/doxygen.warnings; echo "make docs: Doxygen warnings (treated as errors)"; exit 1; fi; \
	  echo "docs: $(BUILD)/docs/html/index.html"

install:
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 md.h md_cuda.cu.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(shell sed -n 's/^#define MD_VERSION "\(.*\)"/\1/p' md.h)|g' \
	  tests/md.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/md.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/md.h $(DESTDIR)$(PREFIX)/include/md_cuda.cu.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/md.pc

clean:
	rm -rf $(BUILD)

help:
	@sed -n '2,10p' Makefile | sed 's/^# *//'
