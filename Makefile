# vflbench developer and reproduction targets. Every target installs first if needed.
PYTHON   ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
EXTRAS   ?= dev,ray,parties,tune,trees,serve,suite
WORKERS  ?= 2
DATASETS ?=
DEVICE   ?= auto
comma    := ,
export VFLBENCH_DATA_MIRROR ?= $(abspath ../shared/data)

.PHONY: install test test-slow test-gpu lint bench bench-compare big-tables demo reproduce-table1 reproduce-credit-clean reproduce-credit-budget reproduce-fmnist reproduce-fmnist-long reproduce-pbm reproduce-false reproduce-false-fmnist false-controlled clean runtime-wan encrypted-credit encrypted-suite robustness robustness-false

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install vflbench with its dev, ray, parties, tune, trees, serve and suite extras (idempotent)

TEST_WORKERS ?= auto
test: $(STAMP)  ## the test suite (no GPU needed), on every core (pytest-xdist; TEST_WORKERS=0: in one process)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not integration"

test-slow: $(STAMP)  ## end-to-end checks kept out of make test (tests marked integration: real processes, sweeps, image models, Ray)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m integration

test-gpu: $(STAMP)  ## the whole suite on a GPU: pipeline, CLI-equivalence and runtime tests compute on CUDA (VFLBENCH_TEST_DEVICE=cuda); needs a CUDA device
	@$(BIN)/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'make test-gpu needs a CUDA device (torch.cuda.is_available() is False); use make test')"
	VFLBENCH_TEST_DEVICE=cuda $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not integration"
	VFLBENCH_TEST_DEVICE=cuda $(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m integration tests/test_runtime.py tests/test_faults.py -k "processes or killed"  # every case of the runtime equivalence, and every killed-party check, on CUDA

lint: $(STAMP)  ## ruff (line length 120, no blanket ignore) and its formatter, as CI runs them
	$(BIN)/ruff check vflbench tests benchmarks scripts docs/examples
	$(BIN)/ruff format --check vflbench tests benchmarks scripts docs/examples

BENCH_ROUNDS ?= 3
BENCH_ARGS := -p no:xdist -p no:cacheprovider -o python_files='bench_*.py' -o testpaths=. --rounds $(BENCH_ROUNDS)
bench: $(STAMP)  ## the benchmark suite (benchmarks/, pytest-benchmark): start-up, a run per method, trees in clear and under Paillier, a pack, PSI, memory on a 1M-row table, serving latency; median seconds and peak RSS per benchmark
	mkdir -p .benchmarks && cd benchmarks && ../$(BIN)/python -m pytest $(BENCH_ARGS) --benchmark-json ../.benchmarks/latest.json . $(if $(K),-k "$(K)")

bench-compare: $(STAMP)  ## the suite beside a git revision, round by round (BASE=REV; K=... for a subset): both medians, both peaks and their ratio
	@test -n "$(BASE)" || { echo "make bench-compare needs BASE=<git revision>"; exit 2; }
	mkdir -p .benchmarks && cd benchmarks && ../$(BIN)/python -m pytest $(BENCH_ARGS) --base $(BASE) --benchmark-json ../.benchmarks/compare.json . $(if $(K),-k "$(K)")

big-tables: $(STAMP)  ## the SYNTHETIC click-through table (data/ctr/): four encodings x Standard VFL, LASER-VFL x 2 trainings x 3 seeds -> results/big_tables/ and its summary.md (vflbench report)
	test -f data/ctr/ctr.csv || $(BIN)/python scripts/make_ctr_table.py --rows 100000 --out data/ctr/ctr.csv
	for v in embed drop embed_ad; do \
	  $(BIN)/vflbench sweep experiments/big_tables/$$v.yaml --workers $(WORKERS) --out results/big_tables/$$v || exit 1; done
	# one-hot blocks are zero-padded to the widest party (3 x 100,000 x 2,002 floats a run): one run at a time
	$(BIN)/vflbench sweep experiments/big_tables/onehot_ad.yaml --workers 1 --pack 1 --out results/big_tables/onehot_ad
	$(BIN)/vflbench report results/big_tables

demo: $(STAMP)  ## six methods on Credit (offline), 3 seeds, a few minutes on 2 cores -> results/demo/
	$(BIN)/vflbench sweep experiments/demo.yaml --workers $(WORKERS) --out results/demo
	$(BIN)/vflbench plot bars results/demo --out results/demo/f1_by_setting
	$(BIN)/vflbench plot curves results/demo --out results/demo/training_curves
	@echo "table: results/demo/table.md   plots: results/demo/f1_by_setting.png, results/demo/training_curves.png"

reproduce-table1: $(STAMP)  ## LASER-VFL Table 1 (GPU advised); DATASETS=credit for one row
	$(BIN)/vflbench sweep experiments/laser_table1.yaml --workers $(WORKERS) $(if $(DATASETS),--datasets $(DATASETS)) --out results/laser_table1/compat

reproduce-credit-clean: $(STAMP)  ## the Credit grid under the clean protocol
	$(BIN)/vflbench sweep experiments/laser_table1_clean.yaml --workers $(WORKERS) --out results/laser_table1/clean

reproduce-credit-budget: $(STAMP)  ## Credit compat p_train 0.5, evaluated at 10-100% of each paper budget (30 runs)
	$(BIN)/vflbench sweep experiments/laser_table1_credit_budget.yaml --workers $(WORKERS) --out results/laser_table1/credit_budget
	$(BIN)/vflbench plot budget results/laser_table1/credit_budget --out results/laser_table1/credit_budget/budget

reproduce-fmnist: $(STAMP)  ## the grid on Fashion-MNIST quadrants with a CPU-sized CNN, 30 epochs with budget evaluations
	$(BIN)/vflbench sweep experiments/laser_table1_fmnist.yaml --workers $(WORKERS) --out results/laser_table1/fmnist
	$(BIN)/vflbench plot budget results/laser_table1/fmnist --out results/laser_table1/fmnist/budget

reproduce-fmnist-long: $(STAMP)  ## the stand-in's six unsettled conditions run to 40 epochs (24 runs, seeds 0-2)
	$(BIN)/vflbench sweep experiments/laser_table1_fmnist_long.yaml --workers $(WORKERS) --out results/laser_table1/fmnist_long
	$(BIN)/vflbench plot budget results/laser_table1/fmnist_long --out results/laser_table1/fmnist_long/budget
	$(BIN)/vflbench table results/laser_table1/fmnist_long --by-budget --out results/laser_table1/fmnist_long/by_budget.md

reproduce-pbm: $(STAMP)  ## PBM-VFL's Phishing results: Table 3 (51 runs), Figures 4 (111) and 6 (78) with LDP at the paper's and at matched sigma, frontier plots, CPU -> results/pbm/
	$(BIN)/vflbench sweep experiments/pbm_table3.yaml --workers $(WORKERS) --out results/pbm/table3
	$(BIN)/vflbench sweep experiments/pbm_fig4.yaml --workers $(WORKERS) --out results/pbm/fig4
	$(BIN)/vflbench plot budget results/pbm/fig4 --panel beta --out results/pbm/fig4/fig4_auprc_by_epoch
	$(BIN)/vflbench plot frontier results/pbm/fig4 --out results/pbm/fig4/frontier
	$(BIN)/vflbench sweep experiments/pbm_fig6.yaml --workers $(WORKERS) --out results/pbm/fig6
	$(BIN)/vflbench plot budget results/pbm/fig6 --panel parties --out results/pbm/fig6/fig6_auprc_by_epoch
	$(BIN)/vflbench plot frontier results/pbm/fig6 --out results/pbm/fig6/frontier

reproduce-false: $(STAMP)  ## FALSE-VFL Tables 12-17 (GPU job: DEVICE=cuda); DATASETS=isolet for one dataset
	$(BIN)/vflbench sweep experiments/false_tables.yaml --workers $(WORKERS) --device $(DEVICE) $(if $(DATASETS),--datasets $(DATASETS)) --out results/false/$(or $(subst $(comma),-,$(DATASETS)),all)

reproduce-false-fmnist: $(STAMP)  ## the CPU-sized FashionMNIST stand-in for FALSE-VFL (16 runs, seed 0)
	$(BIN)/vflbench sweep experiments/false_fmnist_standin.yaml --workers $(WORKERS) --out results/false/fmnist

false-controlled: $(STAMP)  ## the controlled runs behind results/false/README.md (LASER-VFL readings, SimSiam, budget, validation; CPU, resumable)
	$(BIN)/vflbench report results/false/controlled --run --workers $(WORKERS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

ENC_OUT ?= results/trees/encrypted/credit/runs
encrypted-credit: $(STAMP)  ## SecureBoost on the full Credit table (300 trees) under OU and Paillier beside SecureBoost in clear (32 bins, as encrypted: the same trees) and XGBoost, --threads 2 -> results/trees/encrypted/credit/ and its summary.md (vflbench report); about 1.5 h on 2 cores
	for m in xgboost "secureboost --method-opt max_bin=32" "secureboost --method-opt encryption=ou" "secureboost --method-opt encryption=paillier"; do \
	  $(BIN)/vflbench run --dataset credit --parties 4 --method $$m --seed 0 --threads 2 --quiet --out $(ENC_OUT) || exit 1; done
	$(BIN)/vflbench gather results/trees/encrypted/credit
	$(BIN)/vflbench report results/trees/encrypted

ENC_TABLES ?= stackoverflow caravan loans
ENC_TREES ?= 50
encrypted-suite: $(STAMP)  ## the same on three suite tables of different shapes (2 parties; 85 columns in 3; 108 columns and 7 classes in 4), $(ENC_TREES) trees, seed 0, against gbdt (XGBoost hist, the same trees count: xgboost has no option) -> results/trees/encrypted/<table>/ and summary.md; about 1 h on 2 cores
	for t in $(ENC_TABLES); do \
	  for m in gbdt "secureboost --method-opt max_bin=32" "secureboost --method-opt encryption=ou" "secureboost --method-opt encryption=paillier"; do \
	    $(BIN)/vflbench run --dataset suite:$$t --method $$m --method-opt trees=$(ENC_TREES) --seed 0 --threads 2 --quiet --out results/trees/encrypted/$$t/runs || exit 1; done; \
	  $(BIN)/vflbench gather results/trees/encrypted/$$t || exit 1; done
	$(BIN)/vflbench report results/trees/encrypted

robustness: $(STAMP)  ## blocks present but wrong (corrupted, misaligned) beside missing ones on 12 suite tables, 9 methods, 3 splits, trained clean and trained wrong, with screening -> results/robustness/ and its summary.md; hours on 2 cores (resumable)
	$(BIN)/vflbench sweep experiments/robustness.yaml --out results/robustness/clean --workers 2
	$(BIN)/vflbench gather results/robustness/clean --experiment experiments/robustness.yaml
	$(BIN)/vflbench sweep experiments/robustness_trained.yaml --out results/robustness/trained --workers 2
	$(BIN)/vflbench gather results/robustness/trained --experiment experiments/robustness_trained.yaml
	$(BIN)/vflbench report results/robustness

robustness-false: $(STAMP)  ## FALSE-VFL-I in the robustness grids (supervised, on a CUDA device: ~0.7 run-hours a training on one H200, some 7 on 2 CPU cores) -> results/robustness/clean-false1, trained-false1, then the report
	$(BIN)/vflbench sweep experiments/robustness_false.yaml --out results/robustness/clean-false1 --device cuda --workers 6
	$(BIN)/vflbench gather results/robustness/clean-false1 --experiment experiments/robustness_false.yaml
	$(BIN)/vflbench sweep experiments/robustness_false_trained.yaml --out results/robustness/trained-false1 --device cuda --workers 6
	$(BIN)/vflbench gather results/robustness/trained-false1 --experiment experiments/robustness_false_trained.yaml
	$(BIN)/vflbench report results/robustness

runtime-wan: $(STAMP)  ## parties as processes: LASER-VFL vs Standard VFL vs PBM-VFL over an emulated WAN (docs/RUNTIME.md), ~5 min
	$(BIN)/vflbench report results/runtime/wan --run
