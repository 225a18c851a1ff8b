"""A training loop that leaves processes of its own behind, for the process-cleanup tests.

Usage: spawns.py MARKER [STEPS]. It starts, before training:

* a subprocess (``python -c "sleep" MARKER-sub``) in the script's process group;
* a subprocess that leaves the group (its own session: ``MARKER-setsid``);
* a forked ``multiprocessing`` child (non-daemon when training forever);

then trains (a step every few ms), printing ``step N`` so a test can wait for steps: forever, or
STEPS steps and then it exits normally, leaving those processes running.
"""

import multiprocessing
import subprocess
import sys
import time

import torch

marker = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
sleeper = "import time; time.sleep(600)"
subprocess.Popen([sys.executable, "-c", sleeper, f"{marker}-sub"])
subprocess.Popen([sys.executable, "-c", sleeper, f"{marker}-setsid"], start_new_session=True)
# NOTE: non-daemon while training forever (an exit would wait for it); with STEPS the script must
# be able to end, so the child is a daemon then.
multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,), daemon=bool(steps)).start()

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while not steps or step < steps:
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    step += 1
    print(f"step {step}", flush=True)
    time.sleep(0.005)
