"""The command line generated from config dataclasses: flags, --help, precedence and one-line errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from torchhpc.ext.core.cli import ArgumentParser, add_options, describe_flags, options_from_args, run_main
from torchhpc.ext.core.config import option
from torchhpc.ext.core.errors import ConfigError


@dataclass
class Optim:
    """Optimizer settings."""

    lr: float = option(3e-4, help="learning rate (100% of it)", gt=0)
    kind: str = option("adam", help="update rule", choices=["adam", "sgd"])


@dataclass
class Job:
    """A job."""

    target: str = option(help="input file", positional=True)
    optim: Optim = option(default_factory=Optim, help="optimizer")
    epochs: int = option(10, help="passes over the data", ge=1)
    gapped: bool = option(True, help="run the gapped stage", neg_flag="--nogapped")
    max_hits: int = option(5, help="hits per batch", ge=1)
    seed: str = option("12of19", help="seed pattern")
    bottom: list[int] = option(default_factory=lambda: [64], help="layer sizes")
    out: str | None = option(None, help="output file")


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="job")
    add_options(p, Job, config_file=True)
    return p


def test_help_lists_every_option_with_default():
    """--help shows each option's flag, its default and its doc line."""
    text = _parser().format_help()
    for flag, default, doc in describe_flags(Job):
        assert flag in text, flag
        assert f"(default: {default})" in text, (flag, default)
        assert doc.split(" (")[0] in text
    assert "--optim.lr" in text and "(default: 0.0003)" in text and "--nogapped" in text
    assert "--gapped false turns it off" not in text  # it has its own negative flag


def test_a_bool_option_that_defaults_to_true_says_how_to_turn_it_off():
    """A flag alone sets true, so --help says ``--plot false`` where the default is true and there is no
    negative flag; that spelling parses to false."""
    @dataclass
    class Plotting:
        plot: bool = option(True, help="write the plot")
        quiet: bool = option(False, help="say less")

    p = ArgumentParser(prog="job")
    add_options(p, Plotting)
    text = " ".join(p.format_help().split())
    assert "write the plot (default: true); --plot false turns it off" in text and "--quiet false" not in text
    assert options_from_args(Plotting, p.parse_args(["--plot", "false"])).plot is False


def test_flags_build_the_dataclass_with_precedence(tmp_path):
    """defaults < --config < --set < flags; strings stay as typed; YAML lists parse."""
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("epochs: 4\noptim:\n  lr: 0.5\n")
    args = _parser().parse_args(["t.fa", "--config", str(cfg_file), "--set", "epochs=6", "--optim.lr", "1e-3",
                                 "--nogapped", "--max_hits", "7", "--seed", "0110", "--bottom", "[1, 2]"])
    cfg = options_from_args(Job, args)
    assert cfg == Job(target="t.fa", optim=Optim(lr=1e-3), epochs=6, gapped=False, max_hits=7, seed="0110",
                      bottom=[1, 2])
    only_file = options_from_args(Job, _parser().parse_args(["t.fa", "--config", str(cfg_file)]))
    assert only_file.epochs == 4 and only_file.optim.lr == 0.5 and only_file.gapped is True
    assert options_from_args(Job, _parser().parse_args(["t.fa", "--gapped", "false", "--out", "null"])).gapped is False


@pytest.mark.parametrize("argv, needle", [
    (["t.fa", "--max-hits", "0"], "--max-hits: key 'max_hits' = 0 is out of range"),
    (["t.fa", "--optim.lr", "nan"], "--optim.lr: key 'optim.lr' must be a finite number"),
    (["t.fa", "--optim.lr", "inf"], "must be a finite number"),
    (["t.fa", "--optim.kind", "rmsprop"], "--optim.kind: key 'optim.kind' must be one of 'adam', 'sgd'"),
    (["t.fa", "--epochs", "two"], "--epochs: key 'epochs' must be an integer"),
    (["t.fa", "--set", "optim.beta=1"], "unknown key 'optim.beta'"),
])
def test_bad_flag_values_name_the_flag(argv, needle):
    """A bad value is one ConfigError naming the flag as typed and the key."""
    with pytest.raises(ConfigError) as err:
        options_from_args(Job, _parser().parse_args(argv))
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_run_main_prints_one_line(capsys):
    """run_main turns a user error into one stderr line and exit 1; a full disk names the file."""
    args = _parser().parse_args(["t.fa", "--max-hits", "0"])
    assert run_main(lambda a: options_from_args(Job, a), args, "job") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("job: error: --max-hits")

    def full(_a):
        raise OSError(28, "No space left on device", "/dev/full")

    assert run_main(full, args, "job") == 1
    assert capsys.readouterr().err == "job: error: No space left on device: /dev/full\n"


def test_an_error_line_is_one_write(monkeypatch):
    """The line and its newline go to stderr in one write: the ranks of a torchrun job share one pipe, and a
    line written in two pieces could take another rank's line between them."""
    import sys

    from torchhpc.ext.core.errors import InputError, warn

    writes = []

    class Pipe:
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stderr", Pipe())

    def bad(_a):
        raise InputError("x.fa: empty file")

    assert run_main(bad, _parser().parse_args(["t.fa"]), "job") == 1
    warn("a warning")
    assert writes == ["job: error: x.fa: empty file\n", "torchhpc: warning: a warning\n"]


def test_config_file_faults(tmp_path):
    """Random bytes, a repeated key and a folder are one-line errors naming the file."""
    from torchhpc.ext.core.config import load_config

    junk = tmp_path / "junk.yaml"
    junk.write_bytes(bytes(range(256)))
    dup = tmp_path / "dup.yaml"
    dup.write_text("epochs: 3\nepochs: 4\n")
    for path, needle in ((junk, "is not UTF-8"), (dup, "'epochs' appears twice"), (tmp_path, "it is a folder")):
        with pytest.raises(ConfigError) as err:
            load_config(Job, path, ["target=x"])
        assert str(path) in str(err.value) and needle in str(err.value)


def test_bool_flag_never_swallows_an_input_file():
    """``--gapped t.fa`` sets the flag and keeps t.fa as the input; ``--gapped false`` and ``=false`` unset it."""
    p = _parser()
    assert options_from_args(Job, p.parse_args(["--gapped", "t.fa"])) == Job(target="t.fa", gapped=True)
    assert options_from_args(Job, p.parse_args(["--gapped", "false", "t.fa"])).gapped is False
    assert options_from_args(Job, p.parse_args(["t.fa", "--gapped=no"])).gapped is False
    assert options_from_args(Job, p.parse_args(["t.fa", "--gapped", "--nogapped"])).gapped is False


def test_list_flags_repeat_and_split():
    """A list option takes repeated flags, a comma list or a YAML list; the pieces add up."""
    p = _parser()
    assert options_from_args(Job, p.parse_args(["t", "--bottom", "8", "--bottom", "16,32"])).bottom == [8, 16, 32]
    assert options_from_args(Job, p.parse_args(["t", "--bottom", "[1, 2]"])).bottom == [1, 2]
    with pytest.raises(ConfigError, match="--bottom"):
        options_from_args(Job, p.parse_args(["t", "--bottom", "x"]))


def test_required_flag_is_a_usage_error(capsys):
    """Without --config, an option with no default is required by argparse itself (exit 2, one line)."""

    @dataclass
    class Needs:
        checkpoint: str = option(help="run folder")

    p = ArgumentParser(prog="needs")
    add_options(p, Needs)
    with pytest.raises(SystemExit) as exc:
        p.parse_args([])
    assert exc.value.code == 2
    assert "the following arguments are required: --checkpoint" in capsys.readouterr().err


def test_a_shared_configs_keys_a_command_does_not_use_are_named_when_typed(tmp_path, capsys):
    """``config_command(unused=...)``: keys typed as flags or ``--set`` are named in one warning line and the
    command still runs; the same keys from a saved ``--config`` file (which holds every key) say nothing."""
    from torchhpc.ext.core.cli import config_command

    seen = []
    root = ArgumentParser(prog="tool")
    sub = root.add_subparsers(dest="cmd", parser_class=ArgumentParser)
    config_command(sub, "report", Job, seen.append, help="a report", config_file=True,
                   unused=("epochs", "optim.kind"), unused_why="training keys")
    args = root.parse_args(["report", "in.txt", "--epochs", "3", "--set", "optim.kind=sgd", "--max-hits", "2"])
    args.func(args)
    assert seen[-1].epochs == 3 and seen[-1].max_hits == 2
    assert capsys.readouterr().err.splitlines() == [
        "torchhpc: warning: tool report does not use --epochs, --set optim.kind (training keys): ignored"]
    # a section given whole names it when it holds an unused key, not when it holds only used ones
    for section, said in (("optim={kind: sgd}", True), ("optim={lr: 0.1}", False)):
        args = root.parse_args(["report", "in.txt", "--set", section])
        args.func(args)
        err = capsys.readouterr().err
        assert (err == "torchhpc: warning: tool report does not use --set optim (training keys): ignored\n") == said, err
    saved = tmp_path / "job.yaml"
    saved.write_text("target: in.txt\nepochs: 4\noptim: {kind: sgd}\n")
    args = root.parse_args(["report", "in.txt", "--config", str(saved), "--max-hits", "2"])
    args.func(args)
    assert seen[-1].epochs == 4 and seen[-1].optim.kind == "sgd" and capsys.readouterr().err == ""


def test_a_section_set_whole_with_an_unknown_key_is_named():
    """``--set 'optim={bogus: 1}'`` (a section as one mapping; ``{kind:sgd}`` without the space is one key
    to YAML) names the key and the valid ones, as a dotted ``--set optim.bogus=1`` does; a valid one applies."""
    from torchhpc.ext.core.config import load_config

    for text in ("optim={bogus: 1}", "optim={kind:sgd}"):
        with pytest.raises(ConfigError, match=r"unknown key 'optim\.(bogus|kind:sgd)' \(valid keys here: kind, lr\)"):
            load_config(Job, None, ["target=x", text])
    assert load_config(Job, None, ["target=x", "optim={kind: sgd}"]).optim.kind == "sgd"


@dataclass
class Reads:
    """A job that reads files."""

    data: str = option(help="input file", positional=True, input_file=True)
    labels: str | None = option(None, help="labels file", input_file=True)
    note: str | None = option(None, help="not a file")


def test_input_files_are_checked_set_ones_only_and_on_rank_zero(tmp_path, monkeypatch):
    """``option(input_file=True)``: a missing file is one InputError naming the option; ``None`` and ``""`` are
    "not given"; under torchrun only rank 0 checks (the launcher did already; some jobs read on rank 0 only)."""
    from torchhpc.ext.core.cli import check_input_files, job_main
    from torchhpc.ext.core.errors import InputError

    data = tmp_path / "d.txt"
    data.write_text("x")
    check_input_files(Reads(str(data)))
    check_input_files(Reads(str(data), labels=""))
    with pytest.raises(InputError, match=r"--labels .*nope.txt: no such file$"):
        check_input_files(Reads(str(data), labels=str(tmp_path / "nope.txt"), note="nope"))
    with pytest.raises(InputError, match=r"^data .*nope.txt: no such file$"):
        check_input_files(Reads(str(tmp_path / "nope.txt")))
    ran = []
    argv = [str(tmp_path / "nope.txt")]
    monkeypatch.delenv("RANK", raising=False)
    assert job_main("job", Reads, ran.append, argv=argv) == 1 and not ran
    monkeypatch.setenv("RANK", "1")
    assert job_main("job", Reads, ran.append, argv=argv) == 0 and ran[0].data == argv[0]
