"""The notebooks as stored: no machine paths in their outputs (issue 51: the warnings
they showed carried the paths of the machine that ran them), and the cleaner that
`notebooks/run.py` applies against a planted output."""

import importlib.util
import json
import pathlib
import re


ROOT = pathlib.Path(__file__).resolve().parents[1]
_MACHINE = re.compile(r"(/home/|/Users/|/tmp/|/work/|site-packages|ipykernel_\d+|[A-Z]:\\\\)")


def _run_module():
    spec = importlib.util.spec_from_file_location("nb_run", ROOT / "notebooks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stored_notebooks_carry_no_machine_paths():
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", [])) + json.dumps(out.get("data", {}))
                hit = _MACHINE.search(text)
                if hit:
                    near = text[max(0, hit.start() - 40) : hit.end() + 40]
                    found.append(f"{path.name} cell {i}: ...{near}...")
    fix = "run `python notebooks/run.py --clean notebooks/*.ipynb`"
    assert not found, fix + ":\n" + "\n".join(found)


def test_the_cleaner_drops_paths_and_keeps_the_warning():
    run = _run_module()
    text = (
        "/home/me/.venv/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress "
        "not found. Please update jupyter and ipywidgets.\n"
        "  from .autonotebook import tqdm as notebook_tqdm\n"
        "/tmp/ipykernel_11732/3120443264.py:5: NearThresholdWarning: analyze: the rank is "
        "close to the threshold\n"
        "  r = ji.analyze(pr)\n"
        "C:\\Users\\me\\jaxident\\_css.py:99: NearThresholdWarning: select_parameters: close\n"
        "rank 3 of 4: a/b.py:1: not a warning line\n"
    )
    assert run.clean_text(text) == (
        "NearThresholdWarning: analyze: the rank is close to the threshold\n"
        "  r = ji.analyze(pr)\n"
        "NearThresholdWarning: select_parameters: close\n"
        "rank 3 of 4: a/b.py:1: not a warning line\n"
    )
