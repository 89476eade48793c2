# Entry points for a newcomer and for CI. Everything real is in CMake; this
# file only chains set-up, configure, build and run.
#
#   make demo     install missing packages, build, run the benchmark at smoke size
#   make test     install missing packages, build, run every test (ctest)
#   make build    configure + build only
#   make install PREFIX=/some/prefix
#   make clean
#   make check-asan   every test built with ASan + UBSan (build-asan/)
#   make check-tsan   the threaded runtime tests built with TSan (build-tsan/)
#   make check-fuzz   the fuzz targets, 60 s each (tests/fuzz/run.sh)
#   make check-guarded  the guarded backend's suites alone (ctest -L guarded: the
#                     core tests on device memory the host cannot touch; also
#                     part of make test and check-asan)
#   make check-cuda   the CUDA backend's tests that need no GPU (ctest -L cuda;
#                     also part of make test; scripts/device_check.sh runs the
#                     GPU's)
#   make check-avx2   every test again with oneDNN capped to AVX2
#   make check-portable  the convolution and parity tests in a -DLZ_NATIVE=OFF
#                     build (build-portable/), also with oneDNN capped to AVX2
#   make corpus   the PyTorch bridge's whole conformance corpus (python/corpus/run.py
#                 --all: parity, executions per step, time against eager and Inductor)
#   make check-all    test, check-avx2, check-asan, check-tsan, check-fuzz,
#                     check-portable (what CI runs)

BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= 2
CMAKE   ?= cmake

.PHONY: all setup configure build demo test install clean corpus \
        check-avx2 check-asan check-tsan check-fuzz check-portable check-guarded check-cuda check-all

all: build

setup:
	@bash scripts/setup.sh

# Configure output goes to a log (shown only on failure) so that `make demo`
# prints the build and the demo, not CMake's probing.
configure: setup
	@mkdir -p $(BUILD)
	@$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release \
	  > $(BUILD)/configure.log 2>&1 || { cat $(BUILD)/configure.log; exit 1; }

build: configure
	@$(CMAKE) --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/lazyc bench --size smoke

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

install: build
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

# hours on 2 cores; CORPUS_ARGS="--cases a,b" or "--no-time" for part of it
corpus: build
	LAZYC_LIB=$(BUILD)/liblazyc.so OMP_NUM_THREADS=$(JOBS) $$(scripts/pyenv.sh torch) python/corpus/run.py \
	  --all --out $(BUILD)/corpus.md $(CORPUS_ARGS)

clean:
	rm -rf $(BUILD)

# Sanitizer builds (docs/reliability.md, "Sanitizers"). A report aborts the test
# (abort_on_error, halt_on_error, and -fno-sanitize-recover in CMakeLists.txt)
# so that ctest counts it as a failure.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
SAN_CC     ?= gcc
comma := ,
# vgg16's parity is left out of the sanitizer run: a third of that test's
# time there, and its ops (3x3 convolutions, ReLU, max and adaptive pooling,
# linear layers) are alexnet's, which stays; `make test` checks vgg16.
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LZ_PARITY_SKIP=vgg16
# libgomp is not built with TSan: the hand-off from its worker threads back
# to the executor thread at the end of a parallel region is invisible to it
# and every kernel would be reported. One OpenMP thread leaves only lazyc's
# own threads (recording, executor, loader prefetch), which TSan does see.
# No suppressions are needed then (none for oneDNN either: it runs on
# libgomp's team, which is the calling thread alone).
TSAN_ENV = OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
TSAN_TESTS ?= ^test_(semantics|capture.*|sgd|data|dropout|shutdown|fault.*|thread.*|bad_input.*|compile_threads.*|autocast_copies)$$

# ASan's build has the CUDA backend (its planner, code generator and the
# kernels' CPU emulation run there); TSan's runs none of its tests.
define san_configure # build dir, -fsanitize= value, more cmake options
	@mkdir -p $(1)
	@CC=$(SAN_CC) $(CMAKE) -S . -B $(1) -DCMAKE_BUILD_TYPE=Release -DLZ_SANITIZE=$(2) $(3) \
	  > $(1)/configure.log 2>&1 || { cat $(1)/configure.log; exit 1; }
	@$(CMAKE) --build $(1) -j$(JOBS)
endef

check-asan: setup
	$(call san_configure,$(ASAN_BUILD),address$(comma)undefined,-DLZ_CUDA=AUTO)
	$(ASAN_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(JOBS)

# The guarded backend's copies of these (ctest -L guarded) are left out:
# they test what the engine touches, which ASan's run checks, not threads.
check-tsan: setup
	$(call san_configure,$(TSAN_BUILD),thread,-DLZ_CUDA=OFF)
	$(TSAN_ENV) ctest --test-dir $(TSAN_BUILD) --output-on-failure -j$(JOBS) -R '$(TSAN_TESTS)' -LE guarded

check-fuzz: setup
	@bash tests/fuzz/run.sh 60; rc=$$?; \
	 if [ $$rc = 77 ]; then echo "check-fuzz: skipped (see above)"; else exit $$rc; fi

# The numbers on another CPU than the building one: a build without
# -march=native, whose parity runs on the models of test_model_parity_avx2
# (CMakeLists.txt) to keep the added time to a few minutes; the
# reference results come from the plain run's cache.
PORTABLE_BUILD ?= build-portable
PORTABLE_TESTS ?= ^test_(conv_dnnl|conv_dnnl_avx2|model_parity|model_parity_avx2)$$
PORTABLE_MODELS ?= resnet18,mobilenet_v2,squeezenet1_1,vgg16
check-portable: setup
	@mkdir -p $(PORTABLE_BUILD)
	@$(CMAKE) -S . -B $(PORTABLE_BUILD) -DCMAKE_BUILD_TYPE=Release -DLZ_NATIVE=OFF \
	  > $(PORTABLE_BUILD)/configure.log 2>&1 || { cat $(PORTABLE_BUILD)/configure.log; exit 1; }
	@$(CMAKE) --build $(PORTABLE_BUILD) -j$(JOBS) --target lazyc_cli test_models test_conv_dnnl
	LZ_PARITY_MODELS=$(PORTABLE_MODELS) ctest --test-dir $(PORTABLE_BUILD) --output-on-failure \
	  -j$(JOBS) -R '$(PORTABLE_TESTS)'

# The whole suite again with oneDNN capped to AVX2, as on a CPU without
# AVX-512 (other kernels, no Winograd, 8-channel blocks, autocast's products
# widened to f32): the plain build, its own parity references (keyed by the
# cap). Not test_package (label package): the cap changes nothing in how
# pip builds and installs the Python package.
# The guarded backend's suites are left out: they check the backend
# contract, which the ISA does not change (make test runs them); so are
# the CUDA backend's (ctest -L cuda: its plans, NVRTC and its kernels on
# the CPU do not depend on oneDNN's ISA).
check-avx2: build
	DNNL_MAX_CPU_ISA=AVX2 ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -LE 'guarded|cuda|package'

# The CUDA backend's tests that need no GPU (docs/design.md, "The CUDA
# backend"); scripts/device_check.sh runs those that do, on a GPU.
check-cuda: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -L cuda

# The core suites on the guarded test backend alone (docs/design.md,
# "Backend contract"): any access of the engine to device memory crashes.
check-guarded: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -L guarded

check-all: test check-avx2 check-asan check-tsan check-fuzz check-portable
