"""The launcher's progress line: queued, running (steps) and done cells, forced reruns included."""

from experiments.plan import Cell, progress_line


def _cell(tmp_path, seed, steps_written, done):
    c = Cell("grpo", "arith", "grpo", seed, "cpu", (), str(tmp_path), str(tmp_path), 10)
    c.run_dir.mkdir(parents=True)
    (c.run_dir / "metrics.jsonl").write_text("{}\n" * steps_written)
    if done:
        (c.run_dir / "done").write_text("")
    return c


def test_progress_line_states(tmp_path):
    fresh, forced_running, forced_waiting, finished = (
        _cell(tmp_path, 0, 3, False), _cell(tmp_path, 1, 10, True),
        _cell(tmp_path, 2, 10, True), _cell(tmp_path, 3, 10, True))
    cells = [fresh, forced_running, forced_waiting, finished]
    line = progress_line(cells, queued={forced_waiting.name}, running={fresh.name, forced_running.name})
    assert line == "grpo/s0: 3/10 | grpo/s1: 10/10 | grpo/s2: queued | grpo/s3: done"
