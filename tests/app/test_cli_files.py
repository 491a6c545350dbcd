"""``klpolicy plot``'s files: the format follows the file's suffix, and inputs may come from @FILE."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from klpolicy.app.cli import main

PROBLEM = ["--ref", "0.5", "0.5", "--reward", "1", "0"]


@pytest.mark.parametrize(
    ("name", "fmt", "message"),
    [
        ("x.png", "svg", "`--format` 'svg' does not match the suffix of `-o` "),
        ("x.svg", "pdf", "`--format` 'pdf' does not match the suffix of `-o` "),
        ("x.v2", None, "has the suffix .v2, which names no image format"),
    ],
)
def test_plot_refuses_a_format_that_is_not_the_files(capsys, tmp_path, name, fmt, message):
    argv = ["plot", "beta-sweep", *PROBLEM, "-o", str(tmp_path / name), "--dpi", "20"]
    assert main([*argv, "--format", fmt] if fmt else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("klpolicy: error: ") and message in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_plot_prints_the_file_it_wrote(capsys, tmp_path):
    out = tmp_path / "sweep"
    assert main(["plot", "beta-sweep", *PROBLEM, "-o", str(out), "--dpi", "20"]) == 0
    assert capsys.readouterr().out.strip() == f"{out}.png"
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("dpi", ["1e-320", "1e308", "0"])
def test_plot_refuses_a_dpi_by_its_option(capsys, tmp_path, dpi):
    assert main(["plot", "beta-sweep", *PROBLEM, "-o", str(tmp_path / "x.png"), "--dpi", dpi]) == 2
    assert "`--dpi` must be a number in [1, 1200]" in capsys.readouterr().err


def test_inputs_from_a_file(capsys, tmp_path, monkeypatch):
    import klpolicy.plotting as plotting

    rng = np.random.default_rng(0)
    ref, reward = rng.dirichlet(np.ones(5000)), rng.standard_normal(5000)
    # one number a line; and one line, comma-separated, with a comment
    (tmp_path / "ref.txt").write_text("\n".join(repr(float(x)) for x in ref) + "\n")
    (tmp_path / "reward.txt").write_text(
        "# rewards\n" + ", ".join(repr(float(x)) for x in reward) + "\n"
    )
    seen = {}
    real = plotting.beta_sweep

    def spy(ref, reward, **kw):
        seen["ref"], seen["reward"] = np.asarray(ref), np.asarray(reward)
        return real(ref, reward, **{**kw, "betas": [0.5, 2.0]})

    monkeypatch.setattr(plotting, "beta_sweep", spy)
    argv = ["plot", "beta-sweep", "--ref", f"@{tmp_path / 'ref.txt'}"]
    argv += [
        "--reward",
        f"@{tmp_path / 'reward.txt'}",
        "-o",
        str(tmp_path / "s.png"),
        "--dpi",
        "20",
    ]
    assert main(argv) == 0
    np.testing.assert_array_equal(seen["ref"], ref)
    np.testing.assert_array_equal(seen["reward"], reward)
    capsys.readouterr()
    # solve reads them too; a missing file is one line and exit 2
    (tmp_path / "two.txt").write_text("0.5 0.5\n")
    assert (
        main(["solve", "--ref", f"@{tmp_path / 'two.txt'}", "--reward", "1", "0", "--beta", "0.5"])
        == 0
    )
    assert "0.880797" in capsys.readouterr().out
    assert (
        main(["solve", "--ref", f"@{tmp_path / 'nope.txt'}", "--reward", "1", "--beta", "1"]) == 2
    )
    assert "No such file or directory" in capsys.readouterr().err


def test_plot_help_documents_at_file(capsys):
    with pytest.raises(SystemExit):
        main(["plot", "-h"])
    assert "klpolicy plot beta-sweep --ref @ref.txt --reward @reward.txt" in capsys.readouterr().out


def test_beta_sweep_top_and_animation_hold(tmp_path, capsys):
    from PIL import Image

    gif = tmp_path / "a.gif"
    argv = [
        "plot",
        "beta-sweep",
        "--ref",
        "0.4",
        "0.3",
        "0.2",
        "0.1",
        "--reward",
        "1",
        "2",
        "3",
        "4",
    ]
    assert (
        main(
            [
                *argv,
                "--animate",
                str(gif),
                "--frames",
                "3",
                "--fps",
                "10",
                "--hold",
                "0.5",
                "--dpi",
                "20",
            ]
        )
        == 0
    )
    with Image.open(gif) as im:
        durations = []
        for i in range(im.n_frames):
            im.seek(i)
            durations.append(im.info["duration"])
    assert durations == [600, 100, 600]
    assert main([*argv, "--top", "7", "-o", str(tmp_path / "x.png")]) == 2
    assert "`top` must be at most 6" in capsys.readouterr().err
