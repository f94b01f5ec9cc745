"""A multi-start kept on disk (`ji.estimate(problem, starts=N, out=path)`, `jaxident fit
--out`): an interrupted run resumes with only the missing fits and ends where an
uninterrupted one ends; a file of another multi-start, a damaged one or a directory is
refused."""

import numpy as np
import pytest
from helpers import write_petab
from models_for_tests import Decay, decay_data

import jaxident as ji
from jaxident import cli
from jaxident._fit import _optimizers


def _problem():
    t, y = decay_data()
    return ji.Problem.from_model(Decay(), y[:, None], t, 0.01)


def test_an_interrupted_multistart_resumes(monkeypatch, tmp_path):
    problem = _problem()
    whole = ji.estimate(problem, starts=5, progress=False).fits
    real, calls, interrupt = _optimizers.fit_once, [], [3]

    def counted(*args):
        calls.append(1)
        if len(calls) == interrupt[0]:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(_optimizers, "fit_once", counted)
    path = tmp_path / "fits.json"
    with pytest.warns(UserWarning, match="interrupted after 2 of 5 starts.*keeps them"):
        part = ji.estimate(problem, starts=5, progress=False, out=path).fits
    assert part.nll.shape == (2,)
    calls.clear()
    interrupt[0] = None
    resumed = ji.estimate(problem, starts=5, progress=False, out=path).fits
    assert len(calls) == 3  # only the three missing fits ran
    for a, b in ((resumed.theta, whole.theta), (resumed.nll, whole.nll),
                 (resumed.order, whole.order), (resumed.starts, whole.starts),
                 (resumed.result._value, whole.result._value)):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    calls.clear()
    again = ji.estimate(problem, starts=5, progress=False, out=path).fits  # all kept: no fit
    assert calls == [] and again.best_nll == whole.best_nll


def test_a_file_of_another_multistart_is_refused(tmp_path, capsys):
    problem = _problem()
    path = tmp_path / "fits.json"
    ji.estimate(problem, starts=2, progress=False, out=path)
    for other in ({"starts": 3}, {"starts": 2, "free": ["k"]}, {"starts": 2, "max_steps": 50}):
        with pytest.raises(ValueError, match="keeps the fits of another multi-start"):
            ji.estimate(problem, progress=False, out=path, **other)
    path.write_text('{"kind": "jaxident multi-start", "fits": 3}')
    with pytest.raises(ValueError, match="damaged"):
        ji.estimate(problem, starts=2, progress=False, out=path)
    with pytest.raises(ValueError, match="is a directory"):
        ji.estimate(problem, starts=2, progress=False, out=tmp_path)
    with pytest.raises(TypeError, match="batch, optimizer and out"):
        ji.estimate(Decay(), *decay_data()[::-1], out=path)
    yaml = str(write_petab(tmp_path / "p"))
    assert cli.main(["fit", yaml, "--starts", "2", "--out", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and "give another --out" in err and "Traceback" not in err


def test_an_edited_or_torn_file_and_appended_records(tmp_path, capsys):
    """One number edited in a kept file (still valid JSON) was returned as the best fit,
    with a cost `ji.predict` contradicts: each record has a checksum now, and an edit is
    refused. A last line cut short by an interruption is dropped and its fit made again.
    Records are appended: the earlier lines stay as they were written (before, the whole
    file was rewritten after every fit)."""
    import json

    problem = _problem()
    path = tmp_path / "fits.jsonl"
    two = ji.estimate(problem, starts=np.asarray([[0.1, 1.0], [1.0, 3.0]]), progress=False,
                      out=path)  # fmt: skip
    first = path.read_bytes()
    lines = first.decode().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["format"] == 2
    record = json.loads(lines[2])
    record["nll"] = record["nll"] - 5.0  # a better fit, by hand
    path.write_text("\n".join([*lines[:2], json.dumps(record)]) + "\n")
    with pytest.raises(ValueError, match="checksum of line 3 fails: it was edited"):
        ji.estimate(problem, starts=np.asarray([[0.1, 1.0], [1.0, 3.0]]), progress=False,
                    out=path)  # fmt: skip
    # torn: the last record cut in the middle, as an interrupted write leaves it
    path.write_bytes(first[: len(first) - 20])
    again = ji.estimate(problem, starts=np.asarray([[0.1, 1.0], [1.0, 3.0]]), progress=False,
                        out=path)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(again.fits.nll), np.asarray(two.fits.nll))
    assert path.read_bytes() == first  # the torn line dropped, the fit appended again
    # a file of the format before (one JSON object): refused, naming the version
    path.write_text(json.dumps({"kind": "jaxident multi-start", "fingerprint": "x", "fits": {}}))
    with pytest.raises(ValueError, match="another jaxident version"):
        ji.estimate(problem, starts=2, progress=False, out=path)
