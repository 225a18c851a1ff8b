"""A nanoGPT-shaped loop: optimizer built, evaluation under no_grad at iteration 0 and every 25
iterations (60 forward passes over batches sliced from a tensor), batches assembled by hand."""

import torch

torch.manual_seed(0)
data = torch.randn(4096, 16)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def get_batch():
    ix = torch.randint(0, len(data) - 8, (8,))
    return torch.stack([data[i] for i in ix])


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = [model(get_batch()).pow(2).mean().item() for _ in range(60)]
    model.train()
    return sum(losses) / len(losses)


for it in range(100000):
    if it % 25 == 0:
        print(f"iter {it}: val {estimate_loss():.4f}")
    loss = model(get_batch()).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
