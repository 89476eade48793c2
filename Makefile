# Entry points for a newcomer and for CI. Everything real is in CMake; this
# file only chains set-up, configure, build and run.
#
#   make demo     install missing packages, build, run the benchmark at smoke size
#   make test     install missing packages, build, run every test (ctest)
#   make build    configure + build only
#   make install PREFIX=/some/prefix
#   make clean

BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= 2
CMAKE   ?= cmake

.PHONY: all setup configure build demo test install clean

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

clean:
	rm -rf $(BUILD)
