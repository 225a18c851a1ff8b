"""The run's user-code policy (issue 13 item 4): library roots, not package names or substrings."""

from __future__ import annotations

import os

from advisor.capture.usercode import UserCode, library_roots, parse_call_site, user_code_now
from advisor.metrics.userframes import looks_like_user_file


def test_policy_uses_roots_and_the_runs_own_files():
    policy = UserCode(
        library_roots=("/venv/lib/python3.11/site-packages/", "/usr/lib/python3.11/"),
        user_files=("/home/me/advisor/datasets/train.py", "datasets/train.py", "main.py"),
    )
    # a project under a folder named `advisor` owning a package named `datasets` is user code
    assert policy.is_user_file("/home/me/advisor/datasets/train.py")
    assert policy.is_user_file("datasets/train.py") and policy.is_user_file("datasets/other.py")
    assert policy.is_user_file("main.py")
    assert not looks_like_user_file("/home/me/advisor/datasets/train.py")  # the old heuristic
    assert not looks_like_user_file("datasets/train.py")
    # libraries stay libraries, named either way
    assert not policy.is_user_file("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py")
    assert not policy.is_user_file("torch/nn/modules/module.py")
    assert not policy.is_user_file("logging/__init__.py")
    assert not policy.is_user_file("<frozen runpy>") and not policy.is_user_file("")


def test_policy_built_in_this_interpreter_knows_stdlib_torch_and_advisor():
    import torch

    import advisor

    assert all(r.endswith(os.sep) for r in library_roots())  # /usr/lib/python3 never claims python3-x
    policy = user_code_now([__file__])
    assert policy.is_user_file(__file__)
    assert not policy.is_user_file(torch.__file__) and not policy.is_user_file(os.__file__)
    assert not policy.is_user_file(advisor.__file__)
    assert os.path.basename(__file__) in policy.user_files  # as the profiler's stacks name it


def test_call_site_names_round_trip():
    assert parse_call_site("advisor.call@22@f@/a/b@c/main.py") == ("/a/b@c/main.py", 22, "f")
    assert parse_call_site("aten::item") is None and parse_call_site("advisor.call@x@f@m.py") is None


def test_standard_library_packages_are_never_the_users_by_folder():
    # a user file that lives in a folder named like a stdlib package must not pull the stdlib in
    policy = UserCode(library_roots=("/usr/lib/python3.11/",), user_files=("multiprocessing/mine.py",))
    assert policy.is_user_file("multiprocessing/mine.py")  # recorded as the user's: still theirs
    assert not policy.is_user_file("multiprocessing/queues.py")
    assert not looks_like_user_file("multiprocessing/queues.py")
    assert not looks_like_user_file("concurrent/futures/thread.py")
    assert looks_like_user_file("mypkg/data.py")


def _frames_for_this_file():
    from advisor.capture.hooks import UserFrames

    here = os.path.abspath(__file__)
    return UserFrames(UserCode(library_roots=library_roots(), user_files=(here,)))


def test_stack_tuple_is_the_stack_and_is_remembered_only_at_one_frame_and_line():
    frames = _frames_for_this_file()

    def hook():  # stands for the hook: the user's frames are its callers
        return frames.stack_tuple(depth=2)

    def loop(n):
        return [hook() for _ in range(n)]  # one generator frame, one line, n calls

    got = loop(3)
    assert got[0] == got[1] == got[2] and got[0] is got[1]  # remembered, not walked again
    full, _ = frames.stack(depth=1)  # this test's frame and its callers
    assert got[0][-1][1] == "<listcomp>" and got[0][-2][1] == "loop"
    assert [f[:3] for f in got[0][:-2]] == [f[:3] for f in full]
    assert got[0][-3][3] == full[-1][3] - 2  # the test's frame at the line that called loop()
    first = hook()
    second = hook()  # another line of this function: walked again, with its own line
    assert first[-1][3] != second[-1][3] and first is not second
