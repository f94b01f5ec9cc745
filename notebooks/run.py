"""Run notebooks in place and store them without machine paths.

    python notebooks/run.py notebooks/petab_report.ipynb ...     # run, clean, save
    python notebooks/run.py --clean notebooks/*.ipynb            # clean only

Needs the `notebooks` extra (`pip install ".[notebooks]"`). A warning shown in a cell
starts with the file and line that raised it (`/home/you/.venv/.../x.py:99:
NearThresholdWarning: ...`): the stored notebook keeps the warning and drops the path.
Warnings about the notebook front end itself (tqdm's "IProgress not found", shown where
ipywidgets is missing) are dropped. `tests/test_notebooks.py` checks the stored ones.
"""

import argparse
import pathlib
import re


# `path:line: Category: message`, as `warnings.formatwarning` writes it
_WARNING_AT = re.compile(r"^(?:[A-Za-z]:)?[^\s:]*[/\\][^\s:]*\.py:\d+: (?=\w+: )", re.M)
_FRONT_END = re.compile(r"^TqdmWarning: IProgress not found.*\n(?:  .*\n)?", re.M)


def clean_text(text: str) -> str:
    """`text` with the file paths of warnings dropped, and front-end warnings."""
    return _FRONT_END.sub("", _WARNING_AT.sub("", text))


def clean(nb) -> None:
    """Drop machine paths from a notebook's stream outputs, in place (and the outputs
    that are left empty)."""
    for cell in nb.cells:
        outputs = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                out["text"] = clean_text(out["text"])
                if not out["text"]:
                    continue
            outputs.append(out)
        if cell.get("cell_type") == "code":
            cell["outputs"] = outputs


def main(argv=None) -> None:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=pathlib.Path)
    parser.add_argument("--clean", action="store_true", help="clean only, do not run")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        if not args.clean:
            from nbclient import NotebookClient

            NotebookClient(
                nb, timeout=3600, resources={"metadata": {"path": str(path.parent)}}
            ).execute()
        clean(nb)
        nbformat.write(nb, path)
        print(f"{path}: {'cleaned' if args.clean else 'run and cleaned'}")


if __name__ == "__main__":
    main()
