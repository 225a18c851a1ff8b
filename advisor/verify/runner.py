"""``python -m advisor.verify.runner SCRIPT SOURCE [ARGS...]``: run SOURCE as if it were ``python SCRIPT ARGS``.

Both sides of a verification go through here, the script's own source and the patched one, so
they start alike. The code is compiled under the script's name and runs as ``__main__`` with
``__file__``, ``sys.argv`` and ``sys.path[0]`` as the script's own: a script that finds its data
beside itself (``Path(__file__).parent``) or imports its sibling modules runs as it does plainly,
and the patched copy never sits anywhere the user would see it. Only the standard library is
imported here.
"""

from __future__ import annotations

import os
import sys
import types


def main() -> None:
    """Run the source (see the module docstring); the usual exit follows it."""
    if len(sys.argv) < 3:
        print("usage: python -m advisor.verify.runner SCRIPT SOURCE [ARGS...] (started by advisor verify)",
              file=sys.stderr)
        raise SystemExit(2)
    script, source_file, *args = sys.argv[1:]
    with open(source_file, encoding="utf-8") as fh:
        code = compile(fh.read(), script, "exec")
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    exec(code, module.__dict__)  # noqa: S102 - the user's own script, as `python SCRIPT` would run it


if __name__ == "__main__":
    main()
