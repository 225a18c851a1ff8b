"""A script that leaves a daemon behind: started through a parent that exits at once, in a new session.

Usage: daemonizes.py MARKER. The daemon (``python -c sleep MARKER-daemon``) is orphaned within
milliseconds, before advisor's process-tree sweep can see it under the script, and its own
session takes it out of the script's process group: only a child subreaper keeps it (issue #30).
Then a few training steps run and the script ends.
"""

import subprocess
import sys

import torch

marker = sys.argv[1]
launcher = (
    "import subprocess, sys; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]], start_new_session=True)"
)
subprocess.run([sys.executable, "-c", launcher, f"{marker}-daemon"], check=True)
point = torch.ones(2, requires_grad=True)
adam = torch.optim.Adam([point])


def closure():
    adam.zero_grad()
    loss = point.pow(2).sum()
    loss.backward()
    return loss


for _ in range(5):
    adam.step(closure)
