# md.h build. `make help` lists the targets.
#   make demo       build and run every chapter's ladder on its embedded default system
#   make test       set-up (tests/setup.sh installs what is missing), then everything that
#                   can run without a GPU (GPU tests print SKIP)
#   make test-gpu   the GPU tests; fails when there is no usable GPU
#   make gpu-check  on a GPU machine: GPU tests, compute-sanitizer, ceilings, benchmarks -> $OUT
#   make bench      benchmarks (JSON lines in build/bench/)
#   make ceilings   measure this GPU's ceilings -> build/bench/ceilings.json
#   make docs       Doxygen, warnings are errors
#   make install PREFIX=/usr/local
#   make setup      only the set-up: install what make test needs (bash tests/setup.sh --check lists it)

CC      ?= gcc
NVCC    ?= nvcc
# the CUDA toolkit's usual place, when its bin/ is not on PATH
ifeq ($(shell command -v $(NVCC) 2>/dev/null),)
ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
export PATH := $(PATH):/usr/local/cuda/bin
endif
endif
PREFIX  ?= /usr/local
BUILD   := build
CWARN   := -Wall -Wextra -Werror -pedantic
CFLAGS  ?= -O2 -march=native
CFLAGS  += -std=c11 $(CWARN) -fopenmp -I.
LDLIBS  := -lm
MD_ARCH ?= sm_90
# -ffp-contract=off: the host pass must round every float product as the device does
# (md__fmul in md.h); GCC fuses multiply-adds in C++ by default
NVFLAGS ?= -O3 -std=c++17 -arch=$(MD_ARCH) -lineinfo -I. -Xcompiler -Wall,-Wextra,-fopenmp,-march=native,-ffp-contract=off
NVLIBS  := -lcufft -lgomp
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)

C_TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
GPU_TESTS := $(patsubst tests/%.cu,$(BUILD)/tests/%,$(wildcard tests/gpu_*.cu))
C_CHAPTERS  := $(patsubst chapters/%/main.c,$(BUILD)/chapters/%,$(wildcard chapters/*/main.c))
GPU_CHAPTERS:= $(patsubst chapters/%/main.cu,$(BUILD)/chapters/%,$(wildcard chapters/*/main.cu))
# GPU chapters whose main.cu also compiles as C (it tests __CUDACC__): without nvcc they are
# built with $(CC), so their CPU rungs still run and their GPU rungs print SKIP
CPU_CU_CHAPTERS := $(patsubst chapters/%/main.cu,$(BUILD)/chapters/%,$(shell grep -l '^\#ifdef __CUDACC__' chapters/*/main.cu 2>/dev/null))
C_EXAMPLES  := $(patsubst examples/%/main.c,$(BUILD)/examples/%,$(wildcard examples/*/main.c))
GPU_EXAMPLES:= $(patsubst examples/%/main.cu,$(BUILD)/examples/%,$(wildcard examples/*/main.cu))
C_TOOLS     := $(patsubst reference/%.c,$(BUILD)/reference/%,$(wildcard reference/*.c))
BENCHES     := $(patsubst bench/%.cu,$(BUILD)/bench/%,$(wildcard bench/*.cu))
FUZZERS     := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
HEADERS := md.h md_cuda.cu.h $(wildcard tests/*.h)

CPU_BINS := $(C_TESTS) $(C_CHAPTERS) $(C_EXAMPLES) $(C_TOOLS)
GPU_BINS := $(GPU_TESTS) $(GPU_CHAPTERS) $(GPU_EXAMPLES) $(BENCHES)
ifeq ($(HAVE_NVCC),1)
ALL_BINS := $(CPU_BINS) $(GPU_BINS)
DEMO_CHAPTERS := $(sort $(C_CHAPTERS) $(GPU_CHAPTERS))
else
ALL_BINS := $(CPU_BINS) $(CPU_CU_CHAPTERS)
DEMO_CHAPTERS := $(sort $(C_CHAPTERS) $(CPU_CU_CHAPTERS))
endif
NO_NVCC := nvcc not found: install the CUDA toolkit (or put its bin/ on PATH) to build the GPU code

SHELL := /bin/bash
.SECONDEXPANSION:
.PHONY: all demo test test-gpu gpu-check bench ceilings docs install uninstall clean help fuzz gpu setup need-nvcc
all: $(ALL_BINS)
gpu: need-nvcc $(GPU_BINS)
need-nvcc:
	@if [ -z "$(HAVE_NVCC)" ]; then echo "make: $(NO_NVCC)" >&2; exit 1; fi
setup:
	@bash tests/setup.sh

$(BUILD):
	@mkdir -p $(BUILD)
# every output folder exists before any rule runs (run.sh makes build/ first, so an
# order-only prerequisite on build/ alone would not create them)
$(shell mkdir -p $(BUILD)/tests $(BUILD)/chapters $(BUILD)/examples $(BUILD)/reference $(BUILD)/bench $(BUILD)/fuzz)

$(BUILD)/tests/%: tests/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
# the ucontext build of the coroutine tests includes test_co.c
$(BUILD)/tests/test_co_ucontext: tests/test_co.c
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
ifeq ($(HAVE_NVCC),1)
	$(NVCC) $(NVFLAGS) -Ichapters -Ichapters/$* $< -o $@ $(NVLIBS)
else
	$(CC) $(CFLAGS) -Ichapters -Ichapters/$* -x c $< -x none -o $@ $(LDLIBS)
endif
$(BUILD)/examples/%: examples/%/main.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/examples/%: examples/%/main.cu $(HEADERS) $(wildcard examples/*.h) | $(BUILD)
	$(NVCC) $(NVFLAGS) $< -o $@ $(NVLIBS)
$(BUILD)/reference/%: reference/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
$(BUILD)/bench/%: bench/%.cu $(HEADERS) $(wildcard bench/*.h) | $(BUILD)
	$(NVCC) $(NVFLAGS) $< -o $@ $(NVLIBS)
$(BUILD)/fuzz/%: tests/fuzz/%.c md.h | $(BUILD)
	@command -v clang >/dev/null 2>&1 || { echo "make: clang not found (the fuzz targets need clang and its libFuzzer runtime): run 'make setup'" >&2; exit 1; }
	clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I. $< -o $@ -lm
fuzz: $(FUZZERS)

# The chapter ladders in order. A GPU chapter prints SKIP with the reason when there is no device.
# Needs only a C compiler (and nvcc for the GPU chapters).
demo: $(ALL_BINS)
	@for c in $(DEMO_CHAPTERS); do \
	  echo; echo "=== $$(basename $$c) ==="; $$c || exit 1; done
	@if [ -z "$(HAVE_NVCC)" ]; then echo; echo "SKIP GPU chapters $(notdir $(filter-out $(CPU_CU_CHAPTERS),$(GPU_CHAPTERS))): $(NO_NVCC)"; fi

test:
	@bash tests/run.sh

test-gpu: gpu
	@MD_REQUIRE_GPU=1 bash tests/run.sh --gpu-only

gpu-check:
	@bash tests/gpu_check.sh

# The JSON is written only when the program measured something: no GPU, no file.
ceilings: need-nvcc
	@$(MAKE) -s $(BUILD)/bench/ceilings
	@rm -f $(BUILD)/bench/ceilings.json; \
	  if $(BUILD)/bench/ceilings > $(BUILD)/bench/ceilings.json.tmp && [ -s $(BUILD)/bench/ceilings.json.tmp ]; then \
	    mv $(BUILD)/bench/ceilings.json.tmp $(BUILD)/bench/ceilings.json; cat $(BUILD)/bench/ceilings.json; \
	  else rm -f $(BUILD)/bench/ceilings.json.tmp; echo "make ceilings: nothing measured, no $(BUILD)/bench/ceilings.json written" >&2; exit 1; fi

bench: gpu
	@bash tests/gpu_check.sh --bench-only

# The main page is the manual at the top of each header, taken from the header itself, so
# there is one copy of it (Doxygen would keep the " * " of each line in a verbatim block).
MANUAL = awk 'NR == 1 { sub(/^\/\* ?/, "") } /^ \*\// { exit } { sub(/^ \* ?/, ""); sub(/^ \*$$/, ""); print }'
$(BUILD)/docs/mainpage.dox: md.h md_cuda.cu.h Makefile
	@mkdir -p $(BUILD)/docs
	@{ echo '/** @mainpage md.h'; echo 'The manuals at the top of the two headers.'; \
	   echo '@section manual_md_h md.h'; echo '@verbatim'; $(MANUAL) md.h; echo '@endverbatim'; \
	   echo '@section manual_md_cuda_h md_cuda.cu.h'; echo '@verbatim'; $(MANUAL) md_cuda.cu.h; echo '@endverbatim'; \
	   echo '*/'; } > $@
docs: $(BUILD)/docs/mainpage.dox
	@command -v doxygen >/dev/null 2>&1 || { echo "make docs: doxygen not found: run 'make setup' (or apt-get install doxygen)" >&2; exit 1; }
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

help: # the comment block at the top of this file, up to its first blank line
	@sed -n '2,/^$$/{/^#/s/^#   //p}' Makefile
