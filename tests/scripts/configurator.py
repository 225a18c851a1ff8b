"""A ``--key=value`` configurator, as nanoGPT's train.py uses one (written for these tests).

Executed by the training script with ``exec(open(...).read())``: each ``--key=value`` argument
overrides the script's global ``key`` with the literal ``value`` (a string when it is no
literal). An unknown key is an error, as it is in nanoGPT.
"""

import sys
from ast import literal_eval

for _arg in sys.argv[1:]:
    if not _arg.startswith("--") or "=" not in _arg:
        raise SystemExit(f"configurator: expected --key=value, got {_arg!r}")
    _key, _text = _arg[2:].split("=", 1)
    if _key not in globals():
        raise SystemExit(f"configurator: unknown config key {_key!r}")
    try:
        _value = literal_eval(_text)
    except (SyntaxError, ValueError):
        _value = _text
    globals()[_key] = _value
