"""bench/turns.py on the tiny model: TextWorld episodes played with key/value reuse and re-encoding are
the same episodes (same actions, log-probs to float rounding), and the table reads its numbers."""

from __future__ import annotations

import pytest

from envs.benchmarks.textworld.games import _textworld

try:
    _textworld()
except ImportError:
    pytest.skip("textworld is not installed (make setup installs it --no-deps)", allow_module_level=True)


def test_reuse_and_reencoding_play_the_same_textworld_episodes(tmp_path):
    from bench.turns import markdown, measure_turns

    r = measure_turns("tiny", turns=(2, 3), tasks=1, group=2, max_new_tokens=4, precision="32",
                      work_dir=str(tmp_path))
    assert [row["turns"] for row in r["rows"]] == [2, 3]
    for row in r["rows"]:
        assert row["same_actions"] == 1.0 and row["logprob_abs_diff_max"] < 1e-5
        assert row["reuse"]["turns_per_episode"] == row["turns"]  # the untrained model plays every turn
        assert row["reuse"]["cache_hits"] >= 2 * (row["turns"] - 1) and "cache_hits" not in row["reencode"]
    table = "\n".join(markdown(r))
    assert "| 3 (3.0 played) |" in table and "re-encoding" in table


@pytest.mark.vllm
def test_the_vllm_series_plays_the_same_number_of_turns(tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed: `make setup VLLM=1` installs the CPU build")
    from bench.turns import markdown, measure_turns

    r = measure_turns("tiny", turns=(2, 3), tasks=1, group=2, max_new_tokens=4, precision="32",
                      work_dir=str(tmp_path), vllm=True)
    assert r["vllm_sync"] == "merged"  # one adapter, no GPU: merged into the base
    for row in r["rows"]:
        assert row["vllm"]["turns_per_episode"] == row["turns"] and row["vllm"]["generated_tokens"] > 0
    table = "\n".join(markdown(r))
    assert "through our vLLM engine (engine.sync=merged" in table and "| 3 (3.0 played) | " in table
