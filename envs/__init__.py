"""The environments, by kind (`envs.registry.ENVS` names every one):

- `envs/api/`: the text-environment API (`base.py`) and its infrastructure: the features a method may
  need (`features.py`, `protocols.py`), the verifier check (`check.py`, `python -m envs check`), the fuzz
  harness of hostile actions (`fuzz.py`) and the bubblewrap sandbox (`sandbox/`);
- `envs/testbeds/`: the suite's own environments, each built to expose one method's mechanism;
- `envs/benchmarks/`: adapters of real benchmarks installed as packages, and the papers' staged data.

Each environment's whole story (tasks, rules, scoring, scripted demonstrator, and what `python -m envs
check` plays: `oracle_settings`, `oracle_action`, `random_action`) is one module, or one folder when it
has parts (`testbeds/terminal/`, `testbeds/braid/`, `benchmarks/bfcl/`, `benchmarks/tau2/`,
`benchmarks/humaneval/`, `benchmarks/textworld/`, `benchmarks/paper_math/`), its `env.py` holding the
`Environment`.
"""
