# trainyard - the two commands of the README, and their parts.
#
#   make run    install what is missing, build, start the server on
#               127.0.0.1:8080 with its data in ./var
#   make test   install what is missing, build (normal and sanitizer builds),
#               run every test this machine can run
#   make bench  CPU training benchmarks against PyTorch: Fashion-MNIST
#               (bench/train_cpu), then the GPT language model (bench-lm)
#               (minutes; not a test)
#   make bench-lm [ARGS=--quick]  GPT (4 layers, C 128, T 128) on the CPU
#               beside PyTorch: tokens/s, share of the SGEMM ceiling, and
#               validation loss from the same weights (about 8 minutes)
#   make bench-decode [ARGS=...]  generating with the key/value cache
#               against a full forward per token (seconds)
#   make bench-generate [ARGS=...]  text generation served: continuous
#               batching, static batches, transformers + FastAPI (minutes)
#   make bench-generate-soak [ARGS=...]  a server generating for 10
#               minutes, its memory sampled every 30 s
#   make bench-sched  scheduling pass over 10,000 queued jobs, then a
#               cluster of 1,000 GPUs, 100,000 jobs, gangs (seconds)
#   make bench-usage [ARGS=--intervals N]  GET /v1/usage over a million
#               usage intervals: store and HTTP, in milliseconds
#   make bench-dp [ARGS=--steps 400]  data-parallel overhead: 2 MPI ranks
#               x 1 thread against 1 process x 2 threads (about a minute)
#   make bench-serve [ARGS=--quick]  serving benchmark against FastAPI and
#               http.server baselines (about 15 minutes; not a test)
#   make bench-deploy [ARGS=--quick]  serving deployments: batching gain,
#               replica hop, autoscaling, cold start, noisy tenant (minutes)
#   make bench-regression [ARGS=--epochs 40]  regression on targets in
#               natural units against scikit-learn (seconds; not a test)
#   make test-unit [T=test_<module>]  build and run one unit test, or all of them
#   make format  apply .clang-format to every C, header and CUDA file
#   make fuzz [SECONDS=600] [TARGET=name]  run the libFuzzer targets that long
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
VENV       ?= .venv
HF_VENV    ?= .venv-hf

.PHONY: run server build configure test deps test-deps venv test-normal test-sanitize test-unit bench clean bench-lm bench-decode bench-generate bench-generate-soak bench-sched bench-advisor bench-usage bench-dp bench-serve bench-deploy bench-regression bench-slurm format test-fuzz fuzz-build fuzz

run: server
	@scripts/run.sh

deps:
	@scripts/setup.sh build

# The test suites are configured when their tools are there (TRAINYARD_TESTS
# AUTO; one line says when they are not), but `make run` builds only the
# server: it needs nothing of the test suite.
configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINYARD_TESTS=AUTO

server: configure
	cmake --build $(BUILD) -j$(JOBS) --target trainyard

build: configure
	cmake --build $(BUILD) -j$(JOBS)

test-deps:
	@scripts/setup.sh test

# The contract tests' tools (schemathesis, the generated-client and KServe
# client tests) and the docker tests' (hadolint, check-jsonschema) live in a
# virtual environment; it is brought up to date whenever
# tests/contract/requirements.txt changes. The GPT-2 parity test's
# transformers lives in $(HF_VENV), over /usr/bin/python3's packages (its
# torch), brought up to date when tests/parity/requirements-hf.txt changes.
venv: test-deps
	@cmp -s tests/contract/requirements.txt $(VENV)/.contract-requirements || { \
	  { [ -x $(VENV)/bin/pip ] || python3 -m venv $(VENV); } && \
	  $(VENV)/bin/pip install -q --disable-pip-version-check -r tests/contract/requirements.txt && \
	  cp tests/contract/requirements.txt $(VENV)/.contract-requirements; }
	@[ -x $(VENV)/bin/hadolint ] && [ -x $(VENV)/bin/check-jsonschema ] || \
	  $(VENV)/bin/pip install -q --disable-pip-version-check -r docker/requirements.txt
	@cmp -s tests/parity/requirements-hf.txt $(HF_VENV)/.requirements || { \
	  { [ -x $(HF_VENV)/bin/pip ] || /usr/bin/python3 -m venv --system-site-packages $(HF_VENV); } && \
	  $(HF_VENV)/bin/pip install -q --disable-pip-version-check -r tests/parity/requirements-hf.txt && \
	  cp tests/parity/requirements-hf.txt $(HF_VENV)/.requirements; }

test: test-deps venv
	$(MAKE) test-normal test-sanitize test-fuzz

# Warnings are errors here, as in CI.
test-normal:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINYARD_WERROR=ON -DTRAINYARD_TESTS=ON
	cmake --build $(BUILD) -j$(JOBS)
	cd $(BUILD) && ctest --output-on-failure || { /usr/bin/python3 $(CURDIR)/tests/why_failed.py .; exit 1; }

# Unit, integration and parity suites again under AddressSanitizer + UBSan.
test-sanitize:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Sanitize -DTRAINYARD_WERROR=ON -DTRAINYARD_TESTS=ON
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -L 'unit|integration|parity' || { /usr/bin/python3 $(CURDIR)/tests/why_failed.py .; exit 1; }

# The libFuzzer targets (tests/fuzz): a clang build of their own with
# ASan+UBSan. test-fuzz runs each a few seconds (ctest label fuzz, about a
# minute in all); `make fuzz SECONDS=600 [TARGET=csv]` runs them (or one)
# that long each, keeping what they find in $(FUZZ_WORK), not in the
# repository (tests/fuzz/corpus holds the seeds).
SECONDS   ?= 600
TARGET    ?=
FUZZ_WORK ?= $(FUZZ_BUILD)/corpus
fuzz-build:
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINYARD_FUZZ=ON -DTRAINYARD_TESTS=OFF -DTRAINYARD_CUDA=OFF
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzzers

test-fuzz: fuzz-build
	cd $(FUZZ_BUILD) && ctest --output-on-failure --no-tests=error -L fuzz || { /usr/bin/python3 $(CURDIR)/tests/why_failed.py .; exit 1; }

fuzz: fuzz-build
	tests/fuzz/fuzz.sh $(FUZZ_BUILD)/tests/fuzz tests/fuzz/corpus $(FUZZ_WORK) $(SECONDS) $(TARGET)

# While working on one module: `make test-unit T=test_sched` builds the
# test_sched binary alone (and the libraries it links) in $(BUILD) and runs
# it through ctest; with no T, every unit test is built and run. It installs
# nothing and configures $(BUILD) only when the unit tests are not set up
# there yet (no build folder, or one configured without CMocka: `make
# test-deps` installs it). `make test` runs these and everything else.
T ?=
test-unit:
	@[ -z "$(T)" ] || [ -f tests/unit/$(T).c ] || \
	  { echo "test-unit: T=$(T) names no unit test (no tests/unit/$(T).c)"; exit 1; }
	@grep -qs '^CMOCKA_FOUND:INTERNAL=1' $(BUILD)/CMakeCache.txt || \
	  cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINYARD_WERROR=ON -DTRAINYARD_TESTS=AUTO
	@grep -qs '^CMOCKA_FOUND:INTERNAL=1' $(BUILD)/CMakeCache.txt || \
	  { echo "test-unit: the unit tests need CMocka; make test-deps installs it"; exit 1; }
	cmake --build $(BUILD) -j$(JOBS) --target $(or $(T),unit_tests)
	cd $(BUILD) && ctest --output-on-failure --no-tests=error -L unit $(if $(T),-R '^$(T)$$')

bench: build test-deps
	bench/train_cpu --binary $(BUILD)/trainyard
	bench/lm/run.py --build $(BUILD)
	$(BUILD)/bench_decode

# Generating with the key/value cache against a forward of the whole window
# per token (bench/lm/lm_decode.c): tokens/s of each, one JSON line.
bench-decode: build
	$(BUILD)/bench_decode $(ARGS)

# Text generation served (bench/serve/generate.py --help): trainyard with
# continuous batching, with static batches, and transformers behind FastAPI
# on the same weights, at 1, 8 and 32 clients (minutes; installs its venv).
bench-generate: build
	bench/serve/generate.py --binary $(BUILD)/trainyard $(ARGS)

# A server under steady generation for 10 minutes, its memory sampled.
bench-generate-soak: build
	bench/serve/generate_soak.py --binary $(BUILD)/trainyard $(ARGS)

# The language-model case of issue 31 (bench/lm/run.py --help): trainyard's
# trainer (build/bench_lm) and PyTorch on the same text, weights and batches.
bench-lm: build test-deps
	bench/lm/run.py --build $(BUILD) $(ARGS)

bench-sched: build
	$(BUILD)/bench_sched

# The MIG layout advisor replayed on a drifting trace (bench/advisor):
# static layouts against the advice, in queued slice-hours.
bench-advisor: build
	$(BUILD)/bench_advisor

# GET /v1/usage over a million intervals (bench/usage/run.py --help): the
# store's query and the same windows through HTTP, in milliseconds.
bench-usage: build
	bench/usage/run.py --build $(BUILD) $(ARGS)

# The data-parallel overhead (bench/dp/run.py --help); its one rank is the
# dp tests' tests/dp/dp_train, and mpirun comes from openmpi-bin.
bench-dp: build
	cmake --build $(BUILD) --target dp_train dp_comm_bench
	bench/dp/run.py --build $(BUILD) $(ARGS)

# wrk and Python come from scripts/setup.sh bench-serve; FastAPI and uvicorn
# go into a virtual environment outside the repository (bench/serve/run.py
# --help says where).
ARGS ?=
bench-serve: server
	@scripts/setup.sh bench-serve
	bench/serve/run.py --binary $(BUILD)/trainyard $(ARGS)

# Serving deployments: batching gain, the replica hop, autoscaling, cold
# start, the noisy-tenant ratio (bench/serve/deploy.py --help).
bench-deploy: server
	@scripts/setup.sh bench-serve
	bench/serve/deploy.py --binary $(BUILD)/trainyard $(ARGS)

# Regression with prices as targets: trainyard with and without target
# scaling beside scikit-learn's MLPRegressor (bench/regression/run.py --help).
bench-regression: server
	bench/regression/run.py --binary $(BUILD)/trainyard $(ARGS)

# The Slurm executor's overhead beside the local one (root: a single-node
# Slurm from tests/slurm/cluster.sh, stopped afterwards).
bench-slurm: server test-deps
	bench/slurm/run.sh $(BUILD)/trainyard

# The code's format (.clang-format) on every C, header and CUDA file.
format:
	@command -v clang-format >/dev/null || { echo "make format needs clang-format (apt-get install clang-format)"; exit 1; }
	git ls-files '*.c' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
