"""The script's configuration surface: argparse options and configurator globals (in process)."""

from __future__ import annotations

import argparse

from advisor._serde import from_dict, to_jsonable
from advisor.capture.model import ScriptConfig
from advisor.capture.scriptconfig import ConfigRecorder
from advisor.capture.vocab import ConfigStyle


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", "-b", type=int, default=4)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--layers", type=int, nargs="+", default=[1, 2])  # a list: no single knob
    p.add_argument("data", nargs="?", default="x")  # positional: not settable by name
    return p


def test_a_parse_of_the_command_line_records_its_scalar_options(monkeypatch):
    argv = ["-b", "8", "--accum=40", "--amp"]
    monkeypatch.setattr("sys.argv", ["train.py", *argv])
    rec = ConfigRecorder("train.py", argv)
    rec.install()
    try:
        ns = _parser().parse_args()
    finally:
        rec.uninstall()
    assert ns.batch_size == 8 and ns.accum == 40  # the script sees what it always saw
    cfg = rec.config()
    assert [o.name for o in cfg.options] == ["batch_size", "accum", "lr", "amp"]
    b = cfg.get("batch_size")
    assert b.value == 8 and b.flag == "--batch-size" and b.default == 4 and b.style == ConfigStyle.ARGPARSE
    assert cfg.get("amp").action == "store_true" and cfg.get("amp").value is True
    assert argparse.ArgumentParser.parse_known_args.__name__ == "parse_known_args"
    # it round-trips through capture.json
    assert from_dict(ScriptConfig, to_jsonable(cfg)) == cfg


def test_a_parse_of_other_arguments_is_not_the_scripts_surface(monkeypatch):
    monkeypatch.setattr("sys.argv", ["train.py"])
    rec = ConfigRecorder("train.py", [])
    rec.install()
    try:
        _parser().parse_args(["--accum", "3"])  # e.g. a library parsing its own defaults
    finally:
        rec.uninstall()
    assert rec.config().options == ()


def test_configurator_globals_are_recorded_when_an_argument_names_one(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("batch_size = 12\n")
    rec = ConfigRecorder(str(script), ["--batch_size=8"])
    rec.read_globals({"batch_size": 8, "gradient_accumulation_steps": 40, "_private": 1, "model": object(), "np": None})
    cfg = rec.config()
    assert {o.name: o.value for o in cfg.options} == {"batch_size": 8, "gradient_accumulation_steps": 40}
    assert cfg.get("gradient_accumulation_steps").flag == "--gradient_accumulation_steps"
    assert cfg.get("batch_size").style == ConfigStyle.CONFIGURATOR


def test_configurator_is_seen_in_the_source_without_arguments(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("batch_size = 12\nexec(open('configurator.py').read())\n")
    rec = ConfigRecorder(str(script), [])
    rec.read_globals({"batch_size": 12})
    assert rec.config().get("batch_size").value == 12
    plain = tmp_path / "plain.py"
    plain.write_text("batch_size = 12\n")
    other = ConfigRecorder(str(plain), [])
    other.read_globals({"batch_size": 12})
    assert other.config().options == ()  # module globals of an ordinary script are no surface
