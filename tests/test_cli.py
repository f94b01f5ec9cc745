import json
import os
import subprocess
import sys

import pytest

from jaxident import cli


def test_models_lists(capsys):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert "svir" in out and "covid" in out and "alpha_pinene" in out
    # the shipped PEtab problems too, by the names the commands take (issue 51)
    assert "boehm          Boehm_JProteomeRes2014" in out and "fujita" in out


def test_a_shipped_petab_problem_by_name(tmp_path, capsys):
    """`jaxident analyze boehm` was "Unknown model 'boehm'" (issue 51): it is the shipped
    PEtab problem, the same report as from its YAML file."""
    js = tmp_path / "r.json"
    assert cli.main(["analyze", "boehm", "--json", str(js), "--quiet"]) == 0
    assert "Identifiability of Boehm_JProteomeRes2014" in capsys.readouterr().out
    assert json.loads(js.read_text())["parameters"][0] == "Epo_degradation_BaF3"


def test_analyze_with_samples_plot_and_json(tmp_path, capsys):
    png, js = tmp_path / "svir.png", tmp_path / "svir.json"
    rc = cli.main(
        [
            "analyze",
            "svir",
            "--k",
            "3",
            "--samples",
            "24",
            "--batch-size",
            "8",
            "--plot",
            str(png),
            "--json",
            str(js),
            "--quiet",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    # a k chosen by hand decides no identifiability (issue 51): "not selected", and the
    # report's own selection says it is at the numerical rank
    assert "not selected     : alpha" in out and "non-identifiable : alpha" not in out
    assert "k chosen by hand: not a numerical rank" in out
    assert "(StrongRRQR, k=4, at the numerical rank)" in out
    assert "selected in" in out and "0 failed" in out
    assert "k chosen by hand: k=3: 24" in out and "numerical rank over samples" not in out
    assert png.stat().st_size > 10_000
    report = json.loads(js.read_text())
    assert report["nominal"]["non_identifiable"] == ["alpha"]
    assert report["samples"]["frequency"]["alpha"] == 0.0
    assert report["samples"]["rank_counts"] == {"3": 24}


def test_a_model_is_solved_once_for_its_report(tmp_path, monkeypatch, capsys):
    """`jaxident analyze MODEL` (no samples, no k by hand, scale none) prints the
    selection the report decided on: one sensitivity solve and one selection, not a
    second pair through the model's own kernel (issue 48: 6.8 s -> 4.8 s of CPU on SVIR's
    first answer). With `--k` it computes its own, as it must."""
    import jaxident as ji

    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return sensitivity(*args, **kwargs)

    sensitivity = ji.sensitivity
    monkeypatch.setattr(ji, "sensitivity", counted)
    js = tmp_path / "r.json"
    assert cli.main(["analyze", "sir", "--json", str(js), "--quiet"]) == 0
    assert calls == []
    out = capsys.readouterr().out
    report = json.loads(js.read_text())
    # the printed selection is the report's: the same decision, printed twice
    assert report["nominal"] == report["report"]["selection"]
    assert out.count("Selection by StrongRRQR") == 1
    assert cli.main(["analyze", "sir", "--k", "1", "--quiet"]) == 0
    assert len(calls) == 1


@pytest.mark.parametrize("method", ["b1", "b3", "b4", "qrcp"])
def test_analyze_methods(method, capsys):
    assert cli.main(["analyze", "sevir", "--method", method, "--k", "4"]) == 0
    assert "not selected     : alpha" in capsys.readouterr().out


def test_analyze_errors(capsys):
    assert cli.main(["analyze", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "Unknown model" in err and "a shipped PEtab problem (boehm, crauste" in err
    assert cli.main(["analyze", "svir", "--k", "9"]) == 2


def test_a_folder_or_a_module_is_named_as_such(tmp_path, capsys):
    """A folder given for the problem ("no such file" before) and a name in a model file
    that is no class ("ji() needs arguments" before) are said to be what they are
    (issue 51)."""
    (tmp_path / "p.yaml").mkdir()
    for target in (str(tmp_path), str(tmp_path / "p.yaml")):
        assert cli.main(["analyze", target]) == 2
        assert "is a directory; give the PEtab problem's YAML file" in capsys.readouterr().err
    path = tmp_path / "mymodels.py"
    path.write_text("import jaxident as ji\n\n\nclass Decay(ji.ODEModel):\n    pass\n")
    assert cli.main(["analyze", f"{path}:ji"]) == 2
    assert "is a module, not a model class; its classes are ['Decay']" in capsys.readouterr().err


def test_analyze_with_free_initial_states(capsys):
    """`--free-initial-states S,I`: the initial values join the parameters (by the
    model's state_names); an unknown name is one line naming the states."""
    assert cli.main(["analyze", "sir", "--free-initial-states", "S,I"]) == 0
    out = capsys.readouterr().out
    assert "SIR (initial S,I unknown)" in out and "4 parameters" in out
    line = next(x for x in out.splitlines() if x.startswith("  identifiable     : "))
    assert set(line.split(": ")[1].split(", ")) == {"S", "I", "beta", "gamma"}
    assert cli.main(["analyze", "sir", "--free-initial-states", "all"]) == 0
    assert "5 parameters" in capsys.readouterr().out
    assert cli.main(["analyze", "sir", "--free-initial-states", "Q"]) == 2
    assert "SIR's states are S, I, R" in capsys.readouterr().err


def test_a_closed_pipe_ends_the_command_quietly():
    """`jaxident models | head -1`: the reader leaves before the output is written; the
    command ends with 141 (128 + SIGPIPE), no traceback, no error at exit."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written
    out = subprocess.run(
        [sys.executable, "-c", "import sys, jaxident.cli; sys.exit(jaxident.cli.main(['models']))"],
        stdout=w,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(w)
    assert out.returncode == 141, out.stderr
    assert out.stderr == ""
