"""``-o DIR``, ``--seed -1`` and the app's helpers with bad arguments (issue 40, item 19).

``klpolicy plot beta-sweep ... -o DIR`` wrote ``DIR.png`` beside an existing folder and
exited 0; now a folder gets the figure's own file inside it (``DIR/beta_sweep.png``, as
``demo --out DIR``). ``--seed -1`` reached numpy's SeedSequence message; now argparse's
one line, exit 2. ``write_figures(None)`` / a file as the folder, ``print_table`` of a bad
table and ``worked_example(file=3)`` gave pathlib's, KeyError's and AttributeError's
messages; now a ValueError naming the argument.
"""

from __future__ import annotations

import io
import re

import pytest

pytest.importorskip("matplotlib")

from klpolicy.app import demo, tables
from klpolicy.app.cli import main

PROBLEM = ["--ref", "0.5", "0.5", "--reward", "1", "0", "--dpi", "20"]


def test_output_folder_gets_the_figures_file_inside(tmp_path, capsys):
    folder = tmp_path / "figs"
    folder.mkdir()
    assert main(["plot", "beta-sweep", *PROBLEM, "-o", str(folder)]) == 0
    assert capsys.readouterr().out.strip() == str(folder / "beta_sweep.png")
    assert (folder / "beta_sweep.png").stat().st_size > 0
    assert not (tmp_path / "figs.png").exists()
    assert main(["plot", "beta-sweep", *PROBLEM, "-o", str(folder), "--format", "svg"]) == 0
    assert (folder / "beta_sweep.svg").read_text().lstrip().startswith("<?xml")
    # a path that is not a folder keeps its meaning: a suffix-less file gets .png
    assert main(["plot", "beta-sweep", *PROBLEM, "-o", str(tmp_path / "sweep")]) == 0
    assert (tmp_path / "sweep.png").exists()


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (
            [
                "plot",
                "estimator-histograms",
                "--p",
                "0.5",
                "0.5",
                "--q",
                "0.3",
                "0.7",
                "--seed",
                "-1",
            ],
            "argument --seed: must be an integer in [0, 2**128); got -1",
        ),
        (
            [
                "plot",
                "estimator-histograms",
                "--p",
                "0.5",
                "0.5",
                "--q",
                "0.3",
                "0.7",
                "--seed",
                "1.5",
            ],
            "argument --seed: must be an integer >= 0; got '1.5'",
        ),
        (
            ["testbed", "run", "--seed", "-3"],
            "argument --seed: must be an integer in [0, 2**128); got -3",
        ),
    ],
)
def test_a_bad_seed_is_one_line_exit_2(argv, msg, tmp_path, capsys):
    assert main([*argv, "-o", str(tmp_path / "h.png")] if argv[0] == "plot" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(msg) and len(err.splitlines()) == 1, err


BAD_CALLS = [
    (
        lambda p: demo.write_figures(None),
        "`out` must be the path of a folder (a str or a pathlib.Path); got None",
    ),
    (lambda p: demo.write_figures(p / "a_file"), "`out` must be a folder; '{p}/a_file' is a file"),
    (
        lambda p: demo.write_figures(p, "beta_sweep"),
        "`names` must be a list of figure names; got the string 'beta_sweep'",
    ),
    (
        lambda p: demo.write_figures(p, ["nope"]),
        "`names` has an unknown figure 'nope'; choose from ",
    ),
    (
        lambda p: tables.print_table(None),
        "`out` must be the dictionary solve_table returns; got NoneType",
    ),
    (
        lambda p: tables.print_table({}),
        "`out` must be the dictionary solve_table returns (keys 'ref', 'reward', 'columns'); "
        "it lacks 'ref', 'reward', 'columns'",
    ),
    (
        lambda p: tables.print_table({"ref": [1.0], "reward": [0.0], "columns": [{"beta": 1.0}]}),
        "`out['columns'][0]` must be a column of solve_table (keys 'beta', 'policy', 'log_ratio', "
        "'kl', 'expected_reward', 'soft_value'); it lacks 'policy', 'log_ratio', 'kl', "
        "'expected_reward', 'soft_value'",
    ),
    (
        lambda p: tables.print_table(tables.solve_table([0.5, 0.5], [1.0, 0.0], [1.0]), file=3),
        "`file` must be a text stream with a write() method (sys.stdout, an open file, "
        "io.StringIO) or None; got int 3",
    ),
    (
        lambda p: demo.worked_example(file="out.txt"),
        "`file` must be a text stream with a write() method (sys.stdout, an open file, "
        "io.StringIO) or None; got str 'out.txt'",
    ),
]


@pytest.mark.parametrize(("call", "msg"), BAD_CALLS, ids=[m[:40] for _, m in BAD_CALLS])
def test_app_helpers_name_the_bad_argument(call, msg, tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="^" + re.escape(msg.format(p=tmp_path))):
        call(tmp_path)


def test_app_helpers_still_work():
    buf = io.StringIO()
    tables.print_table(tables.solve_table([0.5, 0.5], [1.0, 0.0], [1.0]), file=buf)
    assert "pi*(b=1)" in buf.getvalue()
    buf = io.StringIO()
    demo.worked_example(file=buf)
    assert buf.getvalue().startswith("The KL penalty's worked example")
