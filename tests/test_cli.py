import json

import pytest

from jaxident import cli


def test_models_lists(capsys):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert "svir" in out and "covid" in out and "alpha_pinene" in out


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
    assert "non-identifiable : alpha" in out
    assert "identifiable in" in out and "0 failed" in out
    assert png.stat().st_size > 10_000
    report = json.loads(js.read_text())
    assert report["nominal"]["non_identifiable"] == ["alpha"]
    assert report["samples"]["frequency"]["alpha"] == 0.0
    assert report["samples"]["rank_counts"] == {"3": 24}


@pytest.mark.parametrize("method", ["b1", "b3", "b4", "qrcp"])
def test_analyze_methods(method, capsys):
    assert cli.main(["analyze", "sevir", "--method", method, "--k", "4"]) == 0
    assert "non-identifiable : alpha" in capsys.readouterr().out


def test_analyze_errors(capsys):
    assert cli.main(["analyze", "nosuch"]) == 2
    assert "Unknown model" in capsys.readouterr().err
    assert cli.main(["analyze", "svir", "--k", "9"]) == 2
