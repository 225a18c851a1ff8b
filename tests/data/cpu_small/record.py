"""Records tests/data/cpu_small/*.pt.trace.json.gz: a tiny MLP, a DataLoader and SGD on CPU.

Run from the repository root: ``.venv/bin/python tests/data/cpu_small/record.py``.
"""

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

HERE = Path(__file__).resolve().parent


class Squares(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        x = torch.full((32,), float(i % 7))
        return x, (x * x).sum(dim=0, keepdim=True)


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Squares(), batch_size=16)
    tmp = Path(tempfile.mkdtemp())
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp), worker_name="worker0"),
    ) as prof:
        for step, (x, y) in enumerate(loader):
            x, y = x.to("cpu"), y.to("cpu")  # a no-op on CPU; a host-to-device copy on GPU
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step} loss {loss.item():.4f}")  # one .item() sync per step
            prof.step()
            if step >= 5:
                break
    (src,) = tmp.glob("*.json*")
    data = json.loads(src.read_text()) if src.suffix == ".json" else json.load(gzip.open(src))
    # NOTE: drop the host name from the file name; keep the events as recorded.
    out = HERE / "worker0.pt.trace.json.gz"
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        json.dump(data, fh)
    shutil.rmtree(tmp)
    print(out, out.stat().st_size)


if __name__ == "__main__":
    main()
