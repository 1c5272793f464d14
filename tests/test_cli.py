import json
import subprocess
import sys

import pytest

from airplan_qo import __version__
from airplan_qo.cli import main

KEYS = {"family", "n_nodes", "n_edges", "max_degree", "mean_degree", "lambda2_laplacian",
        "lambda2_normalized", "mixing_rho", "mixing_gap", "mixing_p", "weights",
        "slots_per_round", "seed"}


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_topology_json_shape(capsys):
    assert main(["topology", "ring", "--clients", "50", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert KEYS <= set(data)
    assert data["n_nodes"] == 50 and data["n_edges"] == 50
    assert data["weights"] == "metropolis_hastings"


def test_topology_params_and_weights(capsys):
    assert main(["topology", "erdos_renyi", "-n", "30", "--param", "p=0.3", "--seed", "4",
                 "--weights", "best_constant", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["params"] == {"p": 0.3} and data["seed"] == 4
    assert data["weights"] == "best_constant"


def test_topology_text(capsys):
    assert main(["topology", "small_world", "-n", "20"]) == 0
    out = capsys.readouterr().out
    assert "lambda2_laplacian" in out and "slots_per_round" in out


def test_from_edges(tmp_path, capsys):
    f = tmp_path / "edges.txt"
    f.write_text("a b\nb c\nc d\nd a\n")
    assert main(["topology", "from_edges", "--edges", str(f), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["n_nodes"] == 4 and data["lambda2_laplacian"] == pytest.approx(2.0)


@pytest.mark.parametrize("argv,needle", [
    (["topology", "ring", "-n", "1"], "clients"),
    (["topology", "rin", "-n", "10"], "did you mean 'ring'"),
    (["topology", "erdos_renyi", "-n", "10", "--param", "p=2"], "'p'"),
    (["topology", "erdos_renyi", "-n", "10", "--param", "p"], "key=value"),
    (["topology", "ring", "-n", "10", "--weights", "metro"], "weights"),
    (["topology", "from_edges", "--edges", "/nonexistent/file.txt"], "not found"),
    (["topology", "ring"], "--clients"),
])
def test_user_errors_exit_2_without_traceback(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_console_script_exit_status():
    proc = subprocess.run([sys.executable, "-m", "airplan_qo.cli", "topology", "ring", "-n", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "airplan_qo.cli", "topology"],
                          capture_output=True, text=True)
    assert proc.returncode == 2


def test_explain_options(tmp_path, capsys):
    cat = str(tmp_path / "c.duckdb")
    assert main(["explain", "--catalog", cat, "-n", "20", "-p", "alpha=0.3", "-t", "ring",
                 "-t", "small_world(k=4)", "-k", "0.1", "-k", "1", "--format", "json",
                 "--fallback", "complete", "--transport", "ota",
                 "--algorithm", "auto", "--mix-rounds", "off"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # topologies x k x weights rules, plus the fully connected plan when it is the fallback
    assert doc[0]["candidates"]["considered"] == 2 * 2 * 2 + int(doc[0]["fallback"])


def test_analyze_then_explain_uses_sketches(tmp_path, capsys):
    cat = str(tmp_path / "c.duckdb")
    assert main(["analyze", "digits", "-n", "20", "--catalog", cat, "--format", "json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    # the CLI says which release was chosen: 10 classes give the exact histogram
    assert stats["release_kind"] == "histogram" and (stats["depth"], stats["width"]) == (1, 10)
    assert stats["stats_overhead"] > 0
    assert main(["explain", "--catalog", cat, "-n", "20"]) == 0
    assert "estimated from sketches" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["explain", "-n", "20", "-p", "alpah=1"], "did you mean 'alpha'"),
    (["explain", "-n", "20", "--sla", "accuracy >= 0.9 OR rounds < 3"], "OR"),
    (["explain", "-n", "20", "--estimator", "papr"], "did you mean 'paper'"),
    (["explain", "-n", "20", "-t", "ring(k=2)"], "unknown parameter 'k'"),
    (["analyze", "digits", "-n", "1"], "clients"),
    (["analyze", "digts", "-n", "5"], "did you mean 'digits'"),
])
def test_planner_user_errors(argv, needle, tmp_path, capsys):
    assert main(argv + ["--catalog", str(tmp_path / "c.duckdb")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_resume_unknown_execution(tmp_path, capsys):
    cat = str(tmp_path / "c.duckdb")
    assert main(["sql", "--catalog", cat, "--resume", "999"]) == 2
    assert "no execution 999" in capsys.readouterr().err
    assert main(["resume", "998", "--catalog", cat]) == 2


def test_global_options_may_come_before_the_command(tmp_path, capsys):
    cat = str(tmp_path / "c.duckdb")
    assert main(["analyze", "digits", "-n", "6", "--catalog", cat]) == 0
    capsys.readouterr()
    # as the lock message suggests: options before the command are read by the command
    assert main(["--catalog", cat, "--read-only", "sql",
                 "SELECT count(*) AS n FROM airplan.workloads"]) == 0
    assert "1" in capsys.readouterr().out


def test_plot_command(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    cat = str(tmp_path / "c.duckdb")
    assert main(["sql", "--catalog", cat, "--quiet",
                 "TRAIN digits ON 6 CLIENTS WITH (rounds = 4) USING TOPOLOGY ring "
                 "FALLBACK COMPLETE"]) == 0
    out = tmp_path / "p.png"
    assert main(["plot", "1", "--catalog", cat, "--out", str(out)]) == 0
    assert out.exists() and out.stat().st_size > 5000
    assert main(["plot", "5", "--catalog", cat, "--out", str(out)]) == 2
    assert "no execution 5" in capsys.readouterr().err


_LOCK_HOLDER = ("import sys, duckdb\ncon = duckdb.connect(sys.argv[1])\nprint('ready', flush=True)"
                "\nsys.stdin.read()\ncon.close()\n")


def test_every_command_waits_for_a_held_catalog_then_fails_in_one_line(tmp_path, capsys):
    from airplan_qo.catalog.store import Catalog, default_wait

    path = tmp_path / "held.duckdb"
    Catalog.open(path).close()
    proc = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, str(path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        for argv in (["sql", "--read-only", "SELECT 1"], ["abandon", "1"]):
            assert main([*argv, "--catalog", str(path), "--wait", "0.4"]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 2
            assert err[0].startswith("airplan: note: catalog file ") and \
                f"(PID {proc.pid}); waiting up to 0.4 s" in err[0]
            assert err[1].startswith("airplan: error: catalog file ") and \
                "Waited 0.4 s for it (--wait SECONDS to wait longer)." in err[1]
        assert main(["--wait", "0", "sql", "--catalog", str(path), "--read-only",
                     "SELECT 1"]) == 2
        err = capsys.readouterr().err
        assert "waiting" not in err and "Waited" not in err and "locked by" in err
        assert default_wait() == 0  # the CLI's wait does not outlive the command
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()


def test_wait_must_be_a_non_negative_number(tmp_path, capsys):
    assert main(["sql", "--catalog", str(tmp_path / "c.duckdb"), "--wait", "-1",
                 "SELECT 1"]) == 2
    assert capsys.readouterr().err.strip() == \
        "airplan: error: the lock wait must be a number of seconds >= 0, got -1.0"


def test_help_shows_one_parsing_example_per_command(capsys):
    import shlex

    from airplan_qo.cli import EXAMPLES, build_parser

    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    assert {name for name, _ in EXAMPLES} == commands
    for name, text in EXAMPLES:
        argv = shlex.split(text)[1:]
        assert argv[0] == name and parser.parse_args(argv).command == name, text
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and 'airplan explain "TRAIN digits' in out


def test_no_command_is_a_one_line_hint_and_exit_2(capsys):
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "no command given" in captured.err and "airplan --help" in captured.err


def test_calibrate_after_default_trains_calibrates_the_planner_s_model(tmp_path, capsys):
    cat = str(tmp_path / "c.duckdb")
    assert main(["calibrate", "--catalog", cat]) == 2
    assert "nothing to calibrate: no finished execution has left feedback yet" in \
        capsys.readouterr().err
    trains = "; ".join(f"TRAIN digits ON 10 CLIENTS WITH (rounds = 5, seed = {s})"
                       for s in range(3))
    assert main(["sql", "--catalog", cat, "--quiet", trains]) == 0
    capsys.readouterr()
    assert main(["calibrate", "--catalog", cat, "--min-obs", "4"]) == 2
    err = capsys.readouterr().err
    assert "no estimator has enough observations to calibrate (at least 4 needed): 3 from " \
           "executions planned with ttt" in err
    assert main(["calibrate", "--catalog", cat]) == 0
    out = capsys.readouterr().out
    assert out.startswith("calibrated: ttt (the estimators with enough observations)")
    assert "calibration of the ttt estimator, scope global, 3 observations" in out
    assert "fc.dataset:digits" in out
    # naming an estimator still calibrates that one alone, with its own error
    assert main(["calibrate", "--catalog", cat, "--estimator", "dsgd"]) == 2
    assert "calibrating the dsgd estimator for scope global needs at least 3" in \
        capsys.readouterr().err


def test_explain_plans_mixing_only_tails(tmp_path, capsys):
    argv = ["--catalog", str(tmp_path / "c.duckdb"), "explain", "--dataset", "mnist1d",
            "--clients", "80", "--param", "alpha=1", "--param", "rounds=200", "--topology",
            "one_peer_exponential", "--topology", "complete", "-k", "1", "--transport", "ota",
            "--alternatives", "25"]
    assert main(argv + ["--mix-rounds", "off"]) == 0
    assert "mix=" not in capsys.readouterr().out
    assert main(argv) == 0      # the default with ttt: 'auto'
    assert "one_peer_exponential [prescribed] k=1 mix=" in capsys.readouterr().out
