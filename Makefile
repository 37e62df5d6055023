# Two commands from a fresh clone: `make serve` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: serve test typecheck lint bench demo-model clean

$(STAMP): pyproject.toml app/runtime/fused_op/lngru_step.cc app/runtime/fused_op/ort_abi.h  # the .cc: rebuild the op
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

serve: $(STAMP)
	$(BIN)/lnserve serve

test: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# mypy (settings in pyproject.toml) reads the package under its installed names through a view of links:
# .mypy_cache/src/lnserve/{*.py, eval, app, models, converters} -> the checkout (setup.py maps the folders
# at install time, which no type checker follows). Incremental: ~10 s with its cache, about a minute cold.
TYPECHECK_VIEW := .mypy_cache/src/lnserve
typecheck: $(STAMP)
	@mkdir -p $(TYPECHECK_VIEW)
	@for f in lnserve/*.py lnserve/eval app models converters; do ln -sfn $(CURDIR)/$$f $(TYPECHECK_VIEW)/$$(basename $$f); done
	MYPYPATH=$(dir $(TYPECHECK_VIEW)) $(BIN)/mypy -p lnserve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python benchmarks/encode_throughput.py

# The trained demo from scratch: world -> training -> held-out eval -> app/demo_model/ (about 2 min on 2 cores).
DEMO_WORK := build/demo
DEMO_RECIPE := --cell lngru --dim-word 32 --dim 64 --epochs 12 --seed 7 --device cpu
demo-model: $(STAMP)
	$(BIN)/lnserve train world --out $(DEMO_WORK)/world
	$(BIN)/lnserve train order-embedding --world $(DEMO_WORK)/world $(DEMO_RECIPE) \
		--name demo-lngru --demo --force --out $(DEMO_WORK)/model
	$(BIN)/lnserve eval --model $(DEMO_WORK)/model --captions $(DEMO_WORK)/world/test_caps.txt \
		--images $(DEMO_WORK)/world/test_ims.npy --folds 1 --json $(DEMO_WORK)/eval.json
	$(BIN)/python -m lnserve.app.training.demo ship $(DEMO_WORK)/model $(DEMO_WORK)/world $(DEMO_WORK)/eval.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
