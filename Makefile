# Two commands from a fresh clone: `make serve` (the core install: serving, convert, export, pull, galleries;
# no torch, no development tool) and `make test` (the dev extra: every extra plus ruff, mypy and pytest).
# Each creates .venv on first use; `make test` after `make serve` upgrades that .venv to dev.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUM := $(shell cksum pyproject.toml | cut -d' ' -f1)
CORE_STAMP := $(VENV)/.installed-core-$(SUM)
DEV_STAMP := $(VENV)/.installed-dev-$(SUM)
BUILD_INPUTS := pyproject.toml $(wildcard app/runtime/fused_op/*.cc app/runtime/fused_op/*.h)  # the sources: rebuild the op

.PHONY: serve test typecheck lint bench demo-model clean

# install WHAT SPEC: pip's own progress (what it collects, downloads and installs), the time it took and the
# size of .venv after it; a stale stamp (another pyproject.toml) goes.
define install
	@echo "make: installing $(1) into $(VENV) ($(2)); pip says what it fetches and installs"
	@start=$$(date +%s); \
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || exit 1; \
	$(BIN)/python -m pip install --upgrade pip || exit 1; \
	$(BIN)/python -m pip install -e '$(2)' || exit 1; \
	echo "make: $(1) installed in $$(( $$(date +%s) - start )) s; $(VENV) is $$(du -sh $(VENV) | cut -f1)"
	@rm -f $(VENV)/.installed-*
endef

# the core; a dev install newer than every build input already holds it
$(CORE_STAMP): $(BUILD_INPUTS)
	@if [ -f $(DEV_STAMP) ] && [ -z "$$(find $(BUILD_INPUTS) -newer $(DEV_STAMP))" ]; then \
		touch $@; \
	else \
		$(MAKE) --no-print-directory _core; \
	fi

$(DEV_STAMP): $(BUILD_INPUTS)
	$(call install,the dev extra (every extra: torch, eval, ray; ruff, mypy, pytest...),.[dev])
	@touch $(DEV_STAMP) $(CORE_STAMP)

.PHONY: _core
_core:
	$(call install,lnserve (the core: no torch; pip install 'lnserve[torch]' adds it),.)
	@touch $(CORE_STAMP)

serve: $(CORE_STAMP)
	$(BIN)/lnserve serve

test: $(DEV_STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# mypy (settings in pyproject.toml) reads the package under its installed names through a view of links:
# .mypy_cache/src/lnserve/{*.py, eval, app, models, converters} -> the checkout. Readers that follow files
# (an IDE, pyright, a dependency grapher) need no view: imports between app/, models/ and converters/ are
# relative and resolve on the file system (tests/unit/test_architecture.py). mypy still does, because it
# names a module by its packages, and in the checkout the three folders have no package above them (setup.py
# maps them into lnserve at install time), so a relative import out of app/ would leave mypy's top level.
# Incremental: ~10 s with its cache, about a minute cold.
TYPECHECK_VIEW := .mypy_cache/src/lnserve
typecheck: $(DEV_STAMP)
	@mkdir -p $(TYPECHECK_VIEW)
	@for f in lnserve/*.py lnserve/eval app models converters; do ln -sfn $(CURDIR)/$$f $(TYPECHECK_VIEW)/$$(basename $$f); done
	MYPYPATH=$(dir $(TYPECHECK_VIEW)) $(BIN)/mypy -p lnserve

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(DEV_STAMP)
	$(BIN)/python benchmarks/encode_throughput.py

# The trained demo from scratch: world -> training -> held-out eval -> app/demo_model/ (about 2 min on 2 cores).
DEMO_WORK := build/demo
DEMO_RECIPE := --cell lngru --dim-word 32 --dim 64 --epochs 12 --seed 7 --device cpu
demo-model: $(DEV_STAMP)
	$(BIN)/lnserve train world --out $(DEMO_WORK)/world
	$(BIN)/lnserve train order-embedding --world $(DEMO_WORK)/world $(DEMO_RECIPE) \
		--name demo-lngru --demo --force --out $(DEMO_WORK)/model
	$(BIN)/lnserve calibrate $(DEMO_WORK)/model --texts $(DEMO_WORK)/world/train_caps.txt
	$(BIN)/lnserve eval --model $(DEMO_WORK)/model --captions $(DEMO_WORK)/world/test_caps.txt \
		--images $(DEMO_WORK)/world/test_ims.npy --folds 1 --json $(DEMO_WORK)/eval.json
	$(BIN)/python -m lnserve.app.training.demo ship $(DEMO_WORK)/model $(DEMO_WORK)/world $(DEMO_WORK)/eval.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
