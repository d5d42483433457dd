# relpos developer entry points. `make compare` runs the main job, `make test` the test suite.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: install kernels compare test test-fast browser bench schemes clean

# Create the virtual environment and install relpos with its test extras.
# torch is pinned to the CPU build that lies on this machine's disk; installing it
# first (and naming the pin again on the next call) means pip never downloads
# another build: the package itself sets only a lower bound on torch.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test]" "torch==2.13.0"
	touch $(STAMP)

install: $(STAMP) kernels

# The optional C++ kernels (src/relpos/kernels), compiled once into the user's cache with the
# machine's compiler (about 40 s); a no-op when built. Without a compiler it says so and the
# PyTorch paths serve every call.
kernels: $(STAMP)
	$(PY) -m relpos.kernels build

# Chromium for the explorer's real-browser tests (Debian package; we are root on CI).
browser:
	@(command -v chromium >/dev/null 2>&1 && fc-list :lang=zh | grep -q .) || (apt-get update -q && apt-get install -y -q chromium fonts-wqy-microhei) >/dev/null

compare: $(STAMP) kernels
	$(VENV)/bin/relpos compare

schemes: $(STAMP)
	$(VENV)/bin/relpos schemes

# RELPOS_REQUIRE_KERNELS: the kernels `make kernels` built must load (their tests fail, not skip)
test: $(STAMP) kernels browser
	RELPOS_REQUIRE_KERNELS=1 OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile

test-fast: $(STAMP) kernels
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile -m "not slow and not browser"

bench: $(STAMP) kernels
	$(VENV)/bin/relpos bench

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .hypothesis
