# ferry's front door: a thin wrapper around CMake and CTest.
#
#   make demo      install what is missing, build (Release), run the sm benchmark and
#                  summarise it beside the machine's floors, with a chart
#   make test      everything CI checks, in order: check, asan, tsan (the threaded
#                  parts), warnings, then fuzz for TEST_FUZZ_SECONDS per harness
#   make check     build with warnings as errors and run the test suite
#   make asan      the test suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make tsan      the test suite under ThreadSanitizer
#   make warnings  optimised builds (gcc and clang, -O3) with warnings as errors
#   make fuzz      build the libFuzzer harnesses with clang and run each for
#                  FUZZ_SECONDS (default 60) over its corpus
#   make install   install the Release build (PREFIX=/usr/local by default)
#   make deps      only install the missing Debian packages (.ci/packages)
#   make clean     remove every build folder
#
# CC=clang (on the command line) selects the compiler; JOBS sets the build
# parallelism and CTEST_JOBS the test parallelism.

CMAKE ?= cmake
CTEST ?= ctest
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_JOBS ?= 2
# Extra arguments for every CMake configure step, e.g. CMAKE_ARGS=-G Ninja.
CMAKE_ARGS ?=

# The Debian packages the build and the whole test suite need: the list in
# .ci/packages (one a line, with why), which CI installs too, so that the
# two cannot differ.
DEPS ?= $(strip $(shell sed 's/\#.*//' .ci/packages))

# Make's built-in CC is "cc"; only a compiler named by the user is passed on,
# so that CMake otherwise finds the system default itself.
ifneq ($(filter command line environment,$(origin CC)),)
COMPILER_ARG := -DCMAKE_C_COMPILER=$(CC)
endif

DEMO_DIR := build
TEST_DIR := build-test
ASAN_DIR := build-asan
TSAN_DIR := build-tsan
FUZZ_DIR := build-fuzz
GCC_O3_DIR := build-gcc-o3
CLANG_DIR := build-clang
# Which tests make tsan runs (ctest arguments); empty: all of them. make
# test runs the parts that use threads: the registration cache's monitor
# (ferry's one thread) and the API and unit tests around it.
TSAN_TESTS ?=
TEST_TSAN_TESTS ?= -L 'mem|api|unit'
# How long make test runs each fuzz harness: enough to replay the corpora and
# regressions and to catch a parser that breaks on the first mutations.
TEST_FUZZ_SECONDS ?= 10
# How long make fuzz runs each harness, in seconds, and which (empty: all).
FUZZ_SECONDS ?= 60
FUZZERS ?=

.PHONY: all demo test check asan tsan warnings fuzz install deps clean build-release

all: build-release

# Installs only what dpkg says is missing, so that it is quick (and needs no
# root) when everything is there. Systems without dpkg are left alone.
deps:
	@if ! command -v dpkg-query >/dev/null 2>&1; then \
	    echo "deps: not a Debian system; make sure these are installed: $(DEPS)"; \
	    exit 0; \
	fi; \
	missing=""; \
	for p in $(DEPS); do \
	    status=$$(dpkg-query -W -f='$${db:Status-Status}' "$$p" 2>/dev/null || true); \
	    [ "$$status" = installed ] || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "deps: installing$$missing"; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	else echo "deps: need root (or sudo) to install:$$missing" >&2; exit 1; fi; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing

build-release: deps
	$(CMAKE) -S . -B $(DEMO_DIR) -DCMAKE_BUILD_TYPE=Release $(COMPILER_ARG) $(CMAKE_ARGS)
	$(CMAKE) --build $(DEMO_DIR) -j $(JOBS)

# The demo, ferry's main job: a quiet build (the configure output kept in
# $(DEMO_DIR)/configure.log; one line per compile step; only the three
# programs the demo runs), then the two-process benchmark over shared memory
# (bench/demo.sh: ferry-bench with every figure beside the machine's floor,
# measured in alternating blocks in the same run, ranks bound to separate
# cores), a one-screen summary and a chart in $(DEMO_DIR)/demo.png. Without
# MAKELEVEL and MAKEFLAGS the build's own make does not take itself for a
# sub-make of this one, so it prints no "Entering directory" lines and no
# jobserver warning, whatever CMake generator is used.
demo: deps
	@mkdir -p $(DEMO_DIR)
	@echo "demo: configuring (Release) in $(DEMO_DIR)/"
	@$(CMAKE) -S . -B $(DEMO_DIR) -DCMAKE_BUILD_TYPE=Release $(COMPILER_ARG) $(CMAKE_ARGS) \
	    >$(DEMO_DIR)/configure.log 2>&1 || { cat $(DEMO_DIR)/configure.log; exit 1; }
	@echo "demo: building ferry-bench, ferryrun and ferry_info"
	@env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS $(CMAKE) --build $(DEMO_DIR) -j $(JOBS) \
	    --target ferry-bench ferryrun ferry_info
	@sh bench/demo.sh $(DEMO_DIR)

# The README's test command: what CI runs (.ci/run only installs the
# packages first), one step after the other, stopping at the first failure.
test: deps
	@echo "== make check (warnings as errors)"
	@$(MAKE) --no-print-directory check
	@echo "== make asan (ASan + UBSan)"
	@$(MAKE) --no-print-directory asan
	@echo "== make tsan (ThreadSanitizer: registration cache, API and unit tests)"
	@$(MAKE) --no-print-directory tsan TSAN_TESTS="$(TEST_TSAN_TESTS)"
	@echo "== make warnings (gcc and clang, -O3, warnings as errors)"
	@$(MAKE) --no-print-directory warnings
	@echo "== make fuzz (libFuzzer, $(TEST_FUZZ_SECONDS) s per harness)"
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)
	@echo "== make test passed"

check: deps
	$(CMAKE) -S . -B $(TEST_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_WERROR=ON \
	    $(COMPILER_ARG) $(CMAKE_ARGS)
	$(CMAKE) --build $(TEST_DIR) -j $(JOBS)
	cd $(TEST_DIR) && $(CTEST) --output-on-failure -j $(CTEST_JOBS)

asan: deps
	$(CMAKE) -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON \
	    -DFERRY_SANITIZE=address $(COMPILER_ARG) $(CMAKE_ARGS)
	$(CMAKE) --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && \
	    ASAN_OPTIONS=abort_on_error=0:detect_leaks=1:strict_string_checks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    $(CTEST) --output-on-failure -j $(CTEST_JOBS)

# ThreadSanitizer cannot map its shadow memory when the kernel randomizes
# mmap with the high entropy recent kernels use; the tests run with
# address-space randomization off (setarch -R) where the system allows it.
tsan: deps
	$(CMAKE) -S . -B $(TSAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON \
	    -DFERRY_SANITIZE=thread $(COMPILER_ARG) $(CMAKE_ARGS)
	$(CMAKE) --build $(TSAN_DIR) -j $(JOBS)
	norand=""; \
	if setarch "$$(uname -m)" -R true 2>/dev/null; then norand="setarch $$(uname -m) -R"; fi; \
	cd $(TSAN_DIR) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	    $$norand $(CTEST) --output-on-failure -j $(CTEST_JOBS) $(TSAN_TESTS)

# Release builds are optimised harder than the test build, and gcc warns of
# more there (-Wuse-after-free, -Wstringop-*): both compilers must be quiet.
warnings: deps
	$(CMAKE) -S . -B $(GCC_O3_DIR) -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Release \
	    -DFERRY_WERROR=ON $(CMAKE_ARGS)
	$(CMAKE) --build $(GCC_O3_DIR) -j $(JOBS)
	$(CMAKE) -S . -B $(CLANG_DIR) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release \
	    -DFERRY_WERROR=ON $(CMAKE_ARGS)
	$(CMAKE) --build $(CLANG_DIR) -j $(JOBS)

# libFuzzer harnesses (cmake/fuzz.cmake): every object instrumented and
# sanitized, optimised lightly with assertions kept; each harness runs for
# FUZZ_SECONDS from its committed corpus (tests/fuzz/run_fuzzers.sh), which
# prints the executions and edge coverage of each. A crash fails the run
# and leaves its input in build-fuzz/fuzz-artifacts/.
fuzz: deps
	$(CMAKE) -S . -B $(FUZZ_DIR) -DCMAKE_C_COMPILER=clang -DFERRY_FUZZ=ON -DFERRY_WERROR=ON \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" $(CMAKE_ARGS)
	$(CMAKE) --build $(FUZZ_DIR) -j $(JOBS) --target fuzzers
	sh tests/fuzz/run_fuzzers.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZERS)

# Configured with the prefix so that GNUInstallDirs picks the library folder
# the system expects there (lib/<multiarch> under /usr on Debian).
install: build-release
	$(CMAKE) -S . -B $(DEMO_DIR) -DCMAKE_INSTALL_PREFIX="$(PREFIX)"
	$(CMAKE) --build $(DEMO_DIR) -j $(JOBS)
	$(CMAKE) --install $(DEMO_DIR)

clean:
	rm -rf $(DEMO_DIR) $(TEST_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR) $(GCC_O3_DIR) $(CLANG_DIR)
