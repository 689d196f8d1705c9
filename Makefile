# ferry's front door: a thin wrapper around CMake and CTest.
#
#   make demo      install what is missing, build (Release) and run the sm benchmark
#   make test      build with warnings as errors and run the test suite
#   make asan      the test suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make tsan      the test suite under ThreadSanitizer
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
# Which tests make tsan runs (ctest arguments); empty: all of them.
TSAN_TESTS ?=

.PHONY: all demo test asan tsan install deps clean build-release

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

# The demo, ferry's main job: the two-process benchmark over shared memory
# (ferry-bench: active-message latency, bandwidth and rate, put/get latency
# and bandwidth), each figure beside the machine's own floor measured in the
# same run, with the ranks bound to separate cores.
demo: build-release
	$(DEMO_DIR)/tools/ferryrun/ferryrun -n 2 --bind-to core -x FERRY_BTL=self,sm \
	    $(DEMO_DIR)/bench/ferry-bench all
	@echo
	@echo "Transports in this build (ferry_info; ferry_info -a lists every parameter):"
	@$(DEMO_DIR)/tools/ferry_info/ferry_info

test: deps
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

# Configured with the prefix so that GNUInstallDirs picks the library folder
# the system expects there (lib/<multiarch> under /usr on Debian).
install: build-release
	$(CMAKE) -S . -B $(DEMO_DIR) -DCMAKE_INSTALL_PREFIX="$(PREFIX)"
	$(CMAKE) --build $(DEMO_DIR) -j $(JOBS)
	$(CMAKE) --install $(DEMO_DIR)

clean:
	rm -rf $(DEMO_DIR) $(TEST_DIR) $(ASAN_DIR) $(TSAN_DIR) build-clang
