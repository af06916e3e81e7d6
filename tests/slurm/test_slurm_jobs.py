"""Cell states from run directories, submitit results and sacct; failure reports; launch records."""

from pathlib import Path

from submitit.core.utils import cloudpickle_dump

from slurm.jobs import Entry, Launch, SacctRow, classify, failure_report, parse_sacct
from slurm.monitor import report, summary

SACCT = """\
41_0|COMPLETED|0:0|00:00:12|vm
41_1|CANCELLED by 0|0:15|00:00:03|vm
41_2|RUNNING|0:0|00:00:05|vm
41_[3-5,7%2]|PENDING|0:0|00:00:00|None assigned
41_2.batch|RUNNING|0:0|00:00:05|vm
42|TIMEOUT|0:0|00:30:00|vm
"""


def test_parse_sacct_expands_pending_array_ranges():
    rows = parse_sacct(SACCT)
    assert rows["41_1"] == SacctRow("CANCELLED", "0:15", "00:00:03", "vm")
    assert rows["41_2"].state == "RUNNING"
    assert [j for j in rows if rows[j].state == "PENDING"] == ["41_3", "41_4", "41_5", "41_7"]
    assert rows["42"].state == "TIMEOUT"


def _entry(tmp_path, name="seed-0", job="41_0"):
    folder = tmp_path / "launch" / "%j"
    run_dir = tmp_path / "out" / name
    return Entry(cell={}, label=f"m/e/a/{name}", run_dir=str(run_dir), job_id=job, folder=str(folder))


def test_classify_trusts_the_run_directory_then_the_result_then_sacct(tmp_path):
    e = _entry(tmp_path)
    assert classify(e, None).outcome == "pending"
    assert classify(e, SacctRow("RUNNING", "0:0", "", "vm")).outcome == "running"
    assert classify(e, SacctRow("REQUEUED", "0:0", "", "vm")).outcome == "pending"
    gone = classify(e, SacctRow("OUT_OF_MEMORY", "0:125", "", "vm"))
    assert gone.outcome == "failed" and "OUT_OF_MEMORY" in gone.detail

    e.paths().folder.mkdir(parents=True)
    cloudpickle_dump(("error", "Traceback ...\nValueError: lr must be > 0"), e.paths().result_pickle)
    raised = classify(e, SacctRow("FAILED", "1:0", "", "vm"))
    assert raised.outcome == "failed" and raised.detail == "raised: ValueError: lr must be > 0"

    Path(e.run_dir).mkdir(parents=True)
    (Path(e.run_dir) / "done").write_text("")
    assert classify(e, SacctRow("FAILED", "1:0", "", "vm")).outcome == "done"


def test_failure_report_names_state_and_log_tail(tmp_path):
    e = _entry(tmp_path, job="41_1")
    e.paths().folder.mkdir(parents=True)
    e.paths().stderr.write_text("".join(f"line {i}\n" for i in range(40)) + "step 3\rstep 4\rKilled\n")
    state = classify(e, SacctRow("CANCELLED", "0:15", "", "vm"))
    text = failure_report(state)
    assert text.startswith("FAILED m/e/a/seed-0: SLURM job 41_1 state CANCELLED")
    assert "  | Killed" in text and "line 39" in text and "line 20" not in text
    assert str(e.paths().stderr) in text
    done = _entry(tmp_path, "seed-1", "41_2")
    Path(done.run_dir).mkdir(parents=True)
    (Path(done.run_dir) / "done").write_text("")
    states = [state, classify(done, None)]
    text, missing = report(states)
    assert missing == 1 and text.startswith("1/2 cells done, 1 failed:")
    assert summary(states) == "1/2 done · failed 1"


def test_launch_record_round_trip_rebuilds_the_planners_cells(tmp_path):
    from experiments.replicate import Cell

    cell = Cell("grpo", "arith", "grpo", 0, "smoke", ("scale=smoke", "seed=0"), "runs/smoke", ".cache", 4)
    record = Launch(id=Launch.new_id("grpo", "smoke"), method="grpo", scale="smoke", cwd="/somewhere",
                    work_dir=str(tmp_path), profile={"name": "local"}, cell_type="experiments.replicate:Cell",
                    aggregate="experiments.replicate:collect_tables",
                    entries=[Entry({**cell.__dict__}, cell.name, "/somewhere/runs/smoke/x", "7_0", "/f/%j")])
    loaded = Launch.load(record.save())
    assert (loaded.id, loaded.profile, loaded.entries[0].job_id) == (record.id, {"name": "local"}, "7_0")
    assert loaded.aggregate == "experiments.replicate:collect_tables"
    (rebuilt,) = loaded.cells()
    assert rebuilt.overrides == cell.overrides and rebuilt.out_dir == "/somewhere/runs/smoke"
    assert rebuilt.run_dir == Path("/somewhere/runs/smoke/grpo/arith/grpo/seed-0")


def test_a_launch_recorded_without_a_tables_function_asks_for_one(tmp_path, capsys):
    import json

    from slurm.launch import collect

    record = Launch(id="old", method="grpo", scale="smoke", cwd=str(tmp_path), work_dir=str(tmp_path),
                    profile={"name": "local"}, cell_type="experiments.replicate:Cell")
    data = json.loads(record.save().read_text())
    del data["aggregate"]  # written before launches recorded it
    record.path.write_text(json.dumps(data))
    loaded = Launch.load(record.path)
    assert loaded.aggregate is None
    assert collect(loaded, wait=False) == 2
    err = capsys.readouterr().err
    assert "records no tables function; pass one: python -m slurm collect --entry module:function" in err
